"""The reconcile protocol's messages and their limits (protocols.reconcile is the protocol over the store).

Canonical msgpack under node.wire's rules: a request is `summary` (fingerprints of a step range cut into
at most MAX_BUCKETS buckets), `hashes` (a bucket's leaf hashes) or `entries` (the signed envelopes of at
most MAX_ENTRIES hashes); an answer is the same kind's items, or a refusal with a reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, overload

from p2paudit.attest.record_v2 import INIT_INDEX_STEP
from p2paudit.node.wire.codec import (
    HASH_SIZE,
    MAX_TEXT,
    VERSION,
    PeerRefused,
    WireError,
    check_bin,
    check_fields,
    check_int,
    check_list,
    check_text,
    clip_text,
    pack,
    unpack_message,
)
from p2paudit.node.wire.protocol import ProtocolSpec

RECONCILE_PROTOCOL = "/p2paudit/reconcile/1.0.0"
MAGIC = "p2paudit/reconcile"
MAX_BUCKETS = 64
MAX_HASHES = 8192  # a bucket's hash list: 32 bytes an attestation, at most 270 KB
MAX_ENTRIES = 256
MAX_REQUEST_BYTES = 64 + MAX_ENTRIES * (HASH_SIZE + 2)
MAX_ANSWER_BYTES = 64 + MAX_ENTRIES * (4096 + 3)  # entries are signed envelopes of at most 4,096 bytes
INIT_STEP = INIT_INDEX_STEP  # where the attestation index keeps the initial state's checks (-1)


@dataclass(frozen=True)
class Summary:
    run_id: bytes
    first: int
    last: int
    buckets: int


@dataclass(frozen=True)
class Hashes:
    run_id: bytes
    first: int
    last: int


@dataclass(frozen=True)
class Entries:
    hashes: tuple[bytes, ...]


def bucket_bounds(first: int, last: int, buckets: int) -> list[tuple[int, int]]:
    """Steps first..last cut into `buckets` consecutive ranges (the last ones may be shorter or empty-free)."""
    width = -(-(last - first + 1) // buckets)
    return [(a, min(a + width - 1, last)) for a in range(first, last + 1, width)]


# -- messages ------------------------------------------------------------------------------------------------


def encode_request(request: Summary | Hashes | Entries) -> bytes:
    if isinstance(request, Summary):
        body = ["summary", request.run_id, request.first, request.last, request.buckets]
    elif isinstance(request, Hashes):
        body = ["hashes", request.run_id, request.first, request.last]
    else:
        body = ["entries", list(request.hashes)]
    data = pack([MAGIC, VERSION, *body])
    decode_request(data)  # what we send is what every node accepts
    return data


def _range(run_id: object, first: object, last: object) -> tuple[bytes, int, int]:
    run = check_bin(run_id, "reconcile run id", HASH_SIZE, HASH_SIZE)
    # Step -1 is the initial state's attestations (subject "init"), indexed before step 0.
    a, b = check_int(first, "first step", INIT_STEP), check_int(last, "last step", INIT_STEP)
    if a > b:
        raise WireError(f"reconcile range {a}-{b} runs backwards")
    return run, a, b


def decode_request(data: bytes) -> Summary | Hashes | Entries:
    fields = unpack_message(data, MAX_REQUEST_BYTES, MAGIC, "reconcile request")
    kind = fields[0] if fields else None
    if kind == "summary":
        check_fields(fields, 5, "reconcile summary request")
        return Summary(*_range(*fields[1:4]), check_int(fields[4], "buckets", 1, MAX_BUCKETS + 1))
    if kind == "hashes":
        check_fields(fields, 4, "reconcile hashes request")
        return Hashes(*_range(*fields[1:4]))
    if kind == "entries":
        check_fields(fields, 2, "reconcile entries request")
        items = check_list(fields[1], "entry hashes", 1, MAX_ENTRIES)
        return Entries(tuple(check_bin(h, "entry hash", HASH_SIZE, HASH_SIZE) for h in items))
    raise WireError(f"reconcile request kind {str(kind)[:40]!r} is not summary, hashes or entries")


def encode_answer(kind: str, items: Sequence[object]) -> bytes:
    return pack([MAGIC, VERSION, kind, items])


def refusal(reason: str) -> bytes:
    return pack([MAGIC, VERSION, "refusal", clip_text(reason)])


@overload
def decode_answer(data: bytes, want: Literal["summary"]) -> list[tuple[int, bytes]]: ...
@overload
def decode_answer(data: bytes, want: Literal["hashes", "entries"]) -> list[bytes]: ...
def decode_answer(data: bytes, want: str) -> list[tuple[int, bytes]] | list[bytes]:
    """The answer's items for a request of kind `want`; PeerRefused for a refusal, WireError otherwise."""
    fields = unpack_message(data, MAX_ANSWER_BYTES, MAGIC, "reconcile answer", MAX_HASHES)
    check_fields(fields, 2, "reconcile answer")
    if fields[0] == "refusal":
        raise PeerRefused(f"peer refused to reconcile: {check_text(fields[1], 'reason', MAX_TEXT)}")
    if fields[0] != want:
        raise WireError(f"reconcile answer kind {str(fields[0])[:40]!r}, want {want!r}")
    limit = {"summary": MAX_BUCKETS, "hashes": MAX_HASHES, "entries": MAX_ENTRIES}[want]
    items = check_list(fields[1], f"reconcile {want}", 0, limit)
    if want == "summary":
        out: list[tuple[int, bytes]] = []
        for n, item in enumerate(items):
            pair = check_list(item, f"bucket {n}", 2, 2)
            out.append((check_int(pair[0], f"bucket {n} count"), check_bin(pair[1], f"bucket {n}", 32, 32)))
        return out
    if want == "hashes":
        return [check_bin(h, f"hash {n}", HASH_SIZE, HASH_SIZE) for n, h in enumerate(items)]
    return [check_bin(e, f"entry {n}", 1, 4096) for n, e in enumerate(items)]


# -- over the store (the owner thread) ----------------------------------------------------------------------


RECONCILE = ProtocolSpec(
    RECONCILE_PROTOCOL,
    MAX_REQUEST_BYTES,
    MAX_ANSWER_BYTES,
    10.0,
    refusal,
    encode_request,
    decode_request,
    encode_answer,
    decode_answer,
)
