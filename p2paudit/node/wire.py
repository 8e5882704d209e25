"""Every message the node sends or accepts, as canonical msgpack (byte for byte in docs/network.md).

Each message is one msgpack array that starts with a magic string and a
version: ["p2paudit/<kind>", 1, ...]. Decoding is strict, as for
attestations (attest.codec): the size limit is checked before anything is
parsed, maps, ext types and floats are refused by type, counts are bounded,
no bytes may trail, and the parsed value is re-encoded and compared, so each
value has exactly one encoding. Everything raises WireError (exit code 2)
with a one-line message that carries the numbers.

Only shapes, sizes and limits are checked here; signatures, proofs and
state are judged by validate, sync and witness.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgpack

from p2paudit.attest.codec import MAX_SIGNED_SIZE
from p2paudit.attest.tables import origin_for
from p2paudit.errors import InputError, NetworkError
from p2paudit.identity import peer_id_of

VERSION = 1
MAGIC_BATCH = "p2paudit/batch"
MAGIC_EVIDENCE = "p2paudit/evidence"
MAGIC_SYNC = "p2paudit/sync"
MAGIC_WITNESS = "p2paudit/witness"

SYNC_PROTOCOL = "/p2paudit/sync/1.0.0"
WITNESS_PROTOCOL = "/p2paudit/witness/1.0.0"
# "Are you covered too?" (--until-covered): an empty request; one byte in reply, 0x00 no, 0x01 yes,
# or 0x02 followed by a refusal's UTF-8 reason.
SETTLED_PROTOCOL = "/p2paudit/settled/1.0.0"
EVIDENCE_TOPIC = "/p2paudit/evidence/v1"
MESSAGE_ID_DOMAIN = b"p2paudit/message-id/v1\x00"

HASH_SIZE = 32
MAX_INT = 2**63  # sizes, positions, counts and steps: 0 <= x < 2^63
MAX_BATCH = 256  # attestations per gossip message
MAX_BATCH_BYTES = 256 * 1024
MAX_NOTE_BYTES = 8192  # a signed checkpoint note (a few hundred bytes with one signature)
MAX_EVIDENCE_BYTES = 2 * MAX_NOTE_BYTES + 64
MAX_RUNS = 1024  # runs listed in a status response
MAX_STATUS_BYTES = MAX_NOTE_BYTES + MAX_RUNS * 48 + 64
MAX_PAGE = 256  # entries per sync page
MAX_PROOF_HASHES = 64  # per side of a range proof, and in a consistency proof (C2SP: at most 63)
MAX_PAGE_BYTES = MAX_PAGE * (MAX_SIGNED_SIZE + 3) + 2 * MAX_PROOF_HASHES * (HASH_SIZE + 2) + 64
MAX_SYNC_REQUEST_BYTES = 64
MAX_TEXT = 200  # characters of a refusal's reason
MAX_WITNESS_REQUEST_BYTES = MAX_NOTE_BYTES + MAX_PROOF_HASHES * (HASH_SIZE + 2) + 64
MAX_WITNESS_RESPONSE_BYTES = 1024

EVIDENCE_KINDS = ("dispute", "equivocation", "split_view")
# Witness response codes, each with the C2SP tlog-witness HTTP status it stands for.
WITNESS_OK = 0  # 200: text is the cosignature line
WITNESS_MALFORMED = 1  # 400: the request does not decode
WITNESS_UNKNOWN_LOG = 2  # 404: origin not a log this witness follows
WITNESS_BAD_SIGNATURE = 3  # 403: no valid signature by the log's key
WITNESS_OLD_SIZE_TOO_LARGE = 4  # 400: old size above the checkpoint's size
WITNESS_OLD_SIZE_MISMATCH = 5  # 409: old size is not the witness's latest; `size` says which it is
WITNESS_BAD_PROOF = 6  # 422: the consistency proof does not verify
WITNESS_ROOT_CONFLICT = 7  # 409: same size, other root (a split view, kept as evidence)
WITNESS_UNAVAILABLE = 8  # 503: refused before any check (busy, oversize frame, timed out, internal error)
WITNESS_CODES = range(9)

ORIGIN_PREFIX = "p2paudit.dev/ledger/"
_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_ED25519_PEER_ID_PREFIX = b"\x00\x24\x08\x01\x12\x20"  # identity multihash of protobuf PublicKey{Ed25519, 32 bytes}


class PeerRefused(NetworkError):
    """A peer answered with a refusal and its reason: it declined, it did not lie (never banned for it)."""


class WireError(InputError):
    """A message is malformed, oversized, non-canonical or of an unknown kind or version (exit code 2)."""


# -- primitives --------------------------------------------------------------------------------------------


def pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def unpack_message(data: Any, limit: int, magic: str, what: str, max_items: int = 0) -> list:
    """Parse one canonical message of at most `limit` bytes; return its fields after magic and version.
    Arrays hold at most max(max_items, the largest list any message here allows) items."""
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if type(data) is not bytes:
        raise WireError(f"{what} is {type(data).__name__}, want bytes")
    if len(data) > limit:
        raise WireError(f"{what} has {len(data)} bytes, more than the limit {limit}")
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            max_map_len=0,
            max_ext_len=0,
            max_array_len=max(MAX_BATCH, MAX_PAGE, MAX_RUNS, MAX_PROOF_HASHES, max_items),
            max_bin_len=limit,
            max_str_len=limit,
        )
    except msgpack.ExtraData as exc:
        raise WireError(f"{what} has {len(exc.extra)} trailing bytes") from None
    except (ValueError, TypeError, OverflowError, UnicodeDecodeError, msgpack.UnpackException) as exc:
        raise WireError(f"{what} is not valid msgpack: {type(exc).__name__}: {str(exc)[:80]}") from None
    if type(value) is not list or len(value) < 2:
        raise WireError(f"{what} is not a msgpack array starting with a magic and a version")
    if value[0] != magic or type(value[0]) is not str:
        raise WireError(f"{what} magic is {str(value[0])[:40]!r}, want {magic!r}")
    if type(value[1]) is not int or value[1] != VERSION:
        raise WireError(f"{what} version is {value[1]!r}, want {VERSION}")
    if pack(value) != data:
        raise WireError(f"{what} is not canonically encoded")
    return value[2:]


def check_fields(fields: list, count: int, what: str) -> None:
    if len(fields) != count:
        raise WireError(f"{what} has {len(fields) + 2} fields, want {count + 2}")


def check_int(value: Any, what: str, low: int = 0, high: int = MAX_INT) -> int:
    """An int (never a bool) with low <= value < high."""
    if type(value) is not int:
        raise WireError(f"{what} is {type(value).__name__}, want an integer")
    if not low <= value < high:
        raise WireError(f"{what} is {value}, want {low} <= {what} < {high}")
    return value


def check_bin(value: Any, what: str, low: int, high: int) -> bytes:
    """Bytes (msgpack bin) of low..high bytes."""
    if type(value) is not bytes:
        raise WireError(f"{what} is {type(value).__name__}, want bytes")
    if not low <= len(value) <= high:
        raise WireError(f"{what} has {len(value)} bytes, want {low}..{high}")
    return value


def check_text(value: Any, what: str, high: int) -> str:
    if type(value) is not str:
        raise WireError(f"{what} is {type(value).__name__}, want a string")
    if len(value.encode("utf-8")) > high:
        raise WireError(f"{what} has {len(value.encode('utf-8'))} bytes, more than {high}")
    return value


def check_list(value: Any, what: str, low: int, high: int) -> list:
    if type(value) is not list:
        raise WireError(f"{what} is {type(value).__name__}, want an array")
    if not low <= len(value) <= high:
        raise WireError(f"{what} has {len(value)} items, want {low}..{high}")
    return value


def check_hashes(value: Any, what: str) -> tuple[bytes, ...]:
    items = check_list(value, what, 0, MAX_PROOF_HASHES)
    return tuple(check_bin(h, f"{what} hash {i}", HASH_SIZE, HASH_SIZE) for i, h in enumerate(items))


# -- topics, message ids, origins ----------------------------------------------------------------------------


def run_topic(run_id: bytes) -> str:
    """The gossip topic of a run: /p2paudit/run/<64 lowercase hex digits>/v1."""
    check_bin(run_id, "run id", HASH_SIZE, HASH_SIZE)
    return f"/p2paudit/run/{run_id.hex()}/v1"


def topic_run_id(topic: str) -> bytes:
    """The run id a run topic names; WireError for anything that is not exactly a run topic."""
    if type(topic) is not str or not (topic.startswith("/p2paudit/run/") and topic.endswith("/v1")):
        raise WireError(f"topic {str(topic)[:100]!r} is not /p2paudit/run/<run id hex>/v1")
    text = topic[len("/p2paudit/run/") : -len("/v1")]
    if len(text) != 2 * HASH_SIZE or any(c not in "0123456789abcdef" for c in text):
        raise WireError(f"topic {topic[:100]!r} does not name a run id in 64 lowercase hex digits")
    return bytes.fromhex(text)


def message_id(data: bytes) -> bytes:
    """Content-addressed gossip message id: SHA-256(domain || data), so copies of one message collapse."""
    return hashlib.sha256(MESSAGE_ID_DOMAIN + bytes(data)).digest()


def origin_public_key(origin: str) -> bytes:
    """The Ed25519 key a node ledger's origin names (p2paudit.dev/ledger/<peer id>); WireError otherwise.

    The origin is self-certifying: its peer id is the key, so a checkpoint's
    signer can be checked with nothing but the note.
    """
    if type(origin) is not str or not origin.startswith(ORIGIN_PREFIX):
        raise WireError(f"origin {str(origin)[:80]!r} is not a p2paudit ledger ({ORIGIN_PREFIX}<peer id>)")
    text = origin[len(ORIGIN_PREFIX) :]
    if not 1 <= len(text) <= 64 or any(c not in _BASE58 for c in text):
        raise WireError(f"origin {origin[:80]!r} does not end in a base58 peer id")
    number = 0
    for c in text:
        number = number * 58 + _BASE58.index(c)
    zeros = len(text) - len(text.lstrip("1"))
    raw = b"\x00" * zeros + (number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b"")
    if len(raw) != len(_ED25519_PEER_ID_PREFIX) + 32 or not raw.startswith(_ED25519_PEER_ID_PREFIX):
        raise WireError(f"origin {origin[:80]!r} does not name an Ed25519 peer id")
    key = raw[len(_ED25519_PEER_ID_PREFIX) :]
    if origin_for(key) != origin or peer_id_of(key) != text:
        raise WireError(f"origin {origin[:80]!r} is not the canonical form of its peer id")
    return key


# -- gossip batch -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GossipBatch:
    """Signed attestation envelopes of one run (1..MAX_BATCH of them)."""

    run_id: bytes
    envelopes: tuple[bytes, ...]


def encode_batch(batch: GossipBatch) -> bytes:
    """["p2paudit/batch", 1, run id (bin 32), [envelope (bin), ...]]; WireError if over a limit."""
    check_bin(batch.run_id, "batch run id", HASH_SIZE, HASH_SIZE)
    check_list(list(batch.envelopes), "batch", 1, MAX_BATCH)
    for i, item in enumerate(batch.envelopes):
        check_bin(item, f"batch item {i}", 1, MAX_SIGNED_SIZE)
    data = pack([MAGIC_BATCH, VERSION, batch.run_id, list(batch.envelopes)])
    if len(data) > MAX_BATCH_BYTES:
        raise WireError(f"batch has {len(data)} bytes, more than the limit {MAX_BATCH_BYTES}")
    return data


def decode_batch(data: bytes) -> GossipBatch:
    fields = unpack_message(data, MAX_BATCH_BYTES, MAGIC_BATCH, "gossip batch")
    check_fields(fields, 2, "gossip batch")
    run_id = check_bin(fields[0], "batch run id", HASH_SIZE, HASH_SIZE)
    items = check_list(fields[1], "batch", 1, MAX_BATCH)
    return GossipBatch(run_id, tuple(check_bin(x, f"batch item {i}", 1, MAX_SIGNED_SIZE) for i, x in enumerate(items)))


def batches(run_id: bytes, envelopes: list[bytes]) -> list[bytes]:
    """Encoded batches carrying `envelopes` in order, each within MAX_BATCH items and MAX_BATCH_BYTES."""
    out, current, size = [], [], 64
    for item in envelopes:
        if current and (len(current) == MAX_BATCH or size + len(item) + 3 > MAX_BATCH_BYTES):
            out.append(encode_batch(GossipBatch(run_id, tuple(current))))
            current, size = [], 64
        current.append(item)
        size += len(item) + 3
    if current:
        out.append(encode_batch(GossipBatch(run_id, tuple(current))))
    return out


# -- evidence ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """Two signed statements that conflict: attestation envelopes (dispute, equivocation) or notes (split_view)."""

    kind: str
    first: bytes | str
    second: bytes | str


def _check_evidence_items(kind: Any, first: Any, second: Any) -> None:
    if type(kind) is not str or kind not in EVIDENCE_KINDS:
        raise WireError(f"evidence kind {str(kind)[:40]!r} is not one of {', '.join(EVIDENCE_KINDS)}")
    for name, item in (("first", first), ("second", second)):
        if kind == "split_view":
            check_text(item, f"evidence {name} note", MAX_NOTE_BYTES)
        else:
            check_bin(item, f"evidence {name} attestation", 1, MAX_SIGNED_SIZE)


def encode_evidence(evidence: Evidence) -> bytes:
    """["p2paudit/evidence", 1, kind (str), first, second]: bin envelopes, or str notes for split_view."""
    _check_evidence_items(evidence.kind, evidence.first, evidence.second)
    return pack([MAGIC_EVIDENCE, VERSION, evidence.kind, evidence.first, evidence.second])


def decode_evidence(data: bytes) -> Evidence:
    fields = unpack_message(data, MAX_EVIDENCE_BYTES, MAGIC_EVIDENCE, "evidence")
    check_fields(fields, 3, "evidence")
    _check_evidence_items(*fields)
    return Evidence(*fields)


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
    return encode_sync_response(SyncRefusal(reason[:MAX_TEXT]))


def encode_settled(covered: bool) -> bytes:
    return b"\x01" if covered else b"\x00"


def settled_refusal(reason: str) -> bytes:
    return b"\x02" + reason[:MAX_TEXT].encode()


MAX_SETTLED_BYTES = 1 + 4 * MAX_TEXT


def decode_settled(data: bytes) -> bool:
    """Whether the peer says it is covered; PeerRefused with its reason; WireError for anything else."""
    if data in (b"\x00", b"\x01"):
        return data == b"\x01"
    if data[:1] == b"\x02" and len(data) <= MAX_SETTLED_BYTES:
        try:
            raise PeerRefused(f"peer refused: {data[1:].decode()[:MAX_TEXT]}")
        except UnicodeDecodeError:
            pass
    raise WireError(f"settled answer of {len(data)} bytes is not 0x00, 0x01 or 0x02 + UTF-8 reason")
