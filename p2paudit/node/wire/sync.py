"""History sync and witnessing messages (docs/network.md, byte for byte); node.wire re-exports them.

Sync: a status request and its signed checkpoint, range requests and their
proved pages, refusals. Witnessing: C2SP tlog-witness add-checkpoint and the
cosignature or coded refusal. Only shapes, sizes and limits are checked here;
proofs and signatures are judged by node.protocols.sync and node.protocols.witness.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from p2paudit.attest.codec import MAX_SIGNED_SIZE
from p2paudit.node.wire.codec import (
    HASH_SIZE,
    MAGIC_SYNC,
    MAGIC_WITNESS,
    MAX_NOTE_BYTES,
    MAX_PAGE,
    MAX_PAGE_BYTES,
    MAX_RUNS,
    MAX_SYNC_REQUEST_BYTES,
    MAX_TEXT,
    MAX_WITNESS_REQUEST_BYTES,
    MAX_WITNESS_RESPONSE_BYTES,
    SYNC_PROTOCOL,
    VERSION,
    WITNESS_CODES,
    WITNESS_OK,
    WITNESS_PROTOCOL,
    WITNESS_UNAVAILABLE,
    WireError,
    check_bin,
    check_fields,
    check_hashes,
    check_int,
    check_list,
    check_text,
    clip_text,
    pack,
    unpack_message,
)
from p2paudit.node.wire.protocol import ProtocolSpec

# -- sync ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusRequest:
    """Ask a peer for its signed checkpoint and the runs it holds."""


@dataclass(frozen=True)
class StatusResponse:
    note: str  # the peer's signed checkpoint note
    runs: tuple[tuple[bytes, int], ...]  # (run id, number of steps)


@dataclass(frozen=True)
class RangeRequest:
    """Entries [start, start + count) of the peer's log, proved under its checkpoint of `size` entries."""

    size: int
    start: int
    count: int


@dataclass(frozen=True)
class RangeProof:
    """Hashes of the subtrees left of and right of a range, in tree order (see sync.range_proof_ranges)."""

    left: tuple[bytes, ...]
    right: tuple[bytes, ...]


@dataclass(frozen=True)
class Page:
    start: int
    entries: tuple[bytes, ...]
    proof: RangeProof


@dataclass(frozen=True)
class SyncRefusal:
    """A request the server would not answer, and why (one line)."""

    reason: str


SyncRequest = StatusRequest | RangeRequest
SyncResponse = StatusResponse | Page | SyncRefusal


def encode_sync_request(request: SyncRequest) -> bytes:
    """["p2paudit/sync", 1, "status_request"] or ["p2paudit/sync", 1, "range", size, start, count]."""
    if isinstance(request, StatusRequest):
        return pack([MAGIC_SYNC, VERSION, "status_request"])
    _check_range(request.size, request.start, request.count)
    return pack([MAGIC_SYNC, VERSION, "range", request.size, request.start, request.count])


def _check_range(size: Any, start: Any, count: Any) -> None:
    check_int(size, "range tree size", 1)
    check_int(start, "range start", 0, size)
    check_int(count, "range count", 1, MAX_PAGE + 1)
    if start + count > size:
        raise WireError(f"range [{start}, {start + count}) is not within a tree of size {size}")


def decode_sync_request(data: bytes) -> SyncRequest:
    fields = unpack_message(data, MAX_SYNC_REQUEST_BYTES, MAGIC_SYNC, "sync request")
    kind = fields[0] if fields else None
    if kind == "status_request":
        check_fields(fields, 1, "status request")
        return StatusRequest()
    if kind == "range":
        check_fields(fields, 4, "range request")
        _check_range(*fields[1:])
        return RangeRequest(*fields[1:])
    raise WireError(f"sync request kind {str(kind)[:40]!r} is not status_request or range")


def encode_sync_response(response: SyncResponse) -> bytes:
    """status: [.., "status", note (str), [[run id, steps], ...]]; page: [.., "page", start, [entry...], [left...],
    [right...]]; refusal: [.., "refusal", reason (str)]."""
    if isinstance(response, StatusResponse):
        _check_status(response.note, [list(run) for run in response.runs])
        value = [MAGIC_SYNC, VERSION, "status", response.note, [list(run) for run in response.runs]]
    elif isinstance(response, Page):
        _check_page(response.start, list(response.entries), list(response.proof.left), list(response.proof.right))
        proof = response.proof
        value = [
            MAGIC_SYNC,
            VERSION,
            "page",
            response.start,
            list(response.entries),
            list(proof.left),
            list(proof.right),
        ]
    else:
        value = [MAGIC_SYNC, VERSION, "refusal", check_text(response.reason[:MAX_TEXT], "refusal reason", 4 * MAX_TEXT)]
    data = pack(value)
    if len(data) > MAX_PAGE_BYTES:
        raise WireError(f"sync response has {len(data)} bytes, more than the limit {MAX_PAGE_BYTES}")
    return data


def _check_status(note: Any, runs: Any) -> tuple[tuple[bytes, int], ...]:
    check_text(note, "status note", MAX_NOTE_BYTES)
    out = []
    for i, run in enumerate(check_list(runs, "status runs", 0, MAX_RUNS)):
        check_list(run, f"status run {i}", 2, 2)
        out.append(
            (
                check_bin(run[0], f"status run {i} id", HASH_SIZE, HASH_SIZE),
                check_int(run[1], f"status run {i} steps", 1),
            )
        )
    return tuple(out)


def _check_page(start: Any, entries: Any, left: Any, right: Any) -> Page:
    check_int(start, "page start")
    items = check_list(entries, "page entries", 1, MAX_PAGE)
    entries_ = tuple(check_bin(e, f"page entry {start + i}", 1, MAX_SIGNED_SIZE) for i, e in enumerate(items))
    return Page(
        start, entries_, RangeProof(check_hashes(left, "page left proof"), check_hashes(right, "page right proof"))
    )


def decode_sync_response(data: bytes) -> SyncResponse:
    fields = unpack_message(data, MAX_PAGE_BYTES, MAGIC_SYNC, "sync response")
    kind = fields[0] if fields else None
    if kind == "status":
        check_fields(fields, 3, "status response")
        return StatusResponse(fields[1], _check_status(fields[1], fields[2]))
    if kind == "page":
        check_fields(fields, 5, "page")
        return _check_page(*fields[1:])
    if kind == "refusal":
        check_fields(fields, 2, "sync refusal")
        return SyncRefusal(check_text(fields[1], "refusal reason", 4 * MAX_TEXT))
    raise WireError(f"sync response kind {str(kind)[:40]!r} is not status, page or refusal")


# -- witness -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WitnessRequest:
    """C2SP tlog-witness add-checkpoint: the size the witness last cosigned, a consistency proof from it, the note."""

    old_size: int
    proof: tuple[bytes, ...]
    note: str


@dataclass(frozen=True)
class WitnessResponse:
    """`code` is one of WITNESS_*; `size` is the witness's latest size (OLD_SIZE_MISMATCH), else 0; `text` is the
    cosignature line (OK) or a one-line reason."""

    code: int
    size: int
    text: str


def encode_witness_request(request: WitnessRequest) -> bytes:
    """["p2paudit/witness", 1, "add_checkpoint", old size, [proof hash (bin 32), ...], note (str)]."""
    check_int(request.old_size, "witness old size")
    check_hashes(list(request.proof), "witness consistency proof")
    check_text(request.note, "witness note", MAX_NOTE_BYTES)
    return pack([MAGIC_WITNESS, VERSION, "add_checkpoint", request.old_size, list(request.proof), request.note])


def decode_witness_request(data: bytes) -> WitnessRequest:
    fields = unpack_message(data, MAX_WITNESS_REQUEST_BYTES, MAGIC_WITNESS, "witness request")
    check_fields(fields, 4, "witness request")
    if fields[0] != "add_checkpoint":
        raise WireError(f"witness request kind {str(fields[0])[:40]!r} is not add_checkpoint")
    old_size = check_int(fields[1], "witness old size")
    proof = check_hashes(fields[2], "witness consistency proof")
    return WitnessRequest(old_size, proof, check_text(fields[3], "witness note", MAX_NOTE_BYTES))


def encode_witness_response(response: WitnessResponse) -> bytes:
    """["p2paudit/witness", 1, code, size, text (str)]."""
    check_int(response.code, "witness response code", 0, len(WITNESS_CODES))
    check_int(response.size, "witness response size")
    text = response.text if response.code == WITNESS_OK else response.text[:MAX_TEXT]
    check_text(text, "witness response text", MAX_WITNESS_RESPONSE_BYTES - 64)
    return pack([MAGIC_WITNESS, VERSION, response.code, response.size, text])


def decode_witness_response(data: bytes) -> WitnessResponse:
    fields = unpack_message(data, MAX_WITNESS_RESPONSE_BYTES, MAGIC_WITNESS, "witness response")
    check_fields(fields, 3, "witness response")
    code = check_int(fields[0], "witness response code", 0, len(WITNESS_CODES))
    size = check_int(fields[1], "witness response size")
    return WitnessResponse(code, size, check_text(fields[2], "witness response text", MAX_WITNESS_RESPONSE_BYTES))


def witness_refusal(reason: str) -> bytes:
    """The witness's answer to a request refused before any check (busy, oversize, timed out, internal)."""
    return encode_witness_response(WitnessResponse(WITNESS_UNAVAILABLE, 0, reason[:MAX_TEXT]))


def sync_refusal(reason: str) -> bytes:
    return encode_sync_response(SyncRefusal(clip_text(reason)))


# Both ends of each protocol take these (wire.protocol): the server answers within 10 s.
SYNC = ProtocolSpec(
    SYNC_PROTOCOL,
    MAX_SYNC_REQUEST_BYTES,
    MAX_PAGE_BYTES,
    10.0,
    sync_refusal,
    encode_sync_request,
    decode_sync_request,
    encode_sync_response,
    decode_sync_response,
)
WITNESS = ProtocolSpec(
    WITNESS_PROTOCOL,
    MAX_WITNESS_REQUEST_BYTES,
    MAX_WITNESS_RESPONSE_BYTES,
    10.0,
    witness_refusal,
    encode_witness_request,
    decode_witness_request,
    encode_witness_response,
    decode_witness_response,
)
