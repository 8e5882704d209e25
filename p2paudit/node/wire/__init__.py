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

Here: topics, message ids, origins, gossip batches, evidence and settled
answers. The limits, errors and canonical-bytes primitives are in
wire_codec, the sync and witness messages in wire_sync; both are named
through this module too (`wire.MAX_PAGE_BYTES`, `wire.encode_sync_request`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from p2paudit.attest.codec import MAX_SIGNED_SIZE
from p2paudit.attest.tables import origin_for
from p2paudit.identity import peer_id_of
from p2paudit.node.wire.codec import EVIDENCE_KINDS as EVIDENCE_KINDS
from p2paudit.node.wire.codec import EVIDENCE_TOPIC as EVIDENCE_TOPIC
from p2paudit.node.wire.codec import HASH_SIZE as HASH_SIZE
from p2paudit.node.wire.codec import MAGIC_BATCH as MAGIC_BATCH
from p2paudit.node.wire.codec import MAGIC_EVIDENCE as MAGIC_EVIDENCE
from p2paudit.node.wire.codec import MAGIC_SYNC as MAGIC_SYNC
from p2paudit.node.wire.codec import MAGIC_WITNESS as MAGIC_WITNESS
from p2paudit.node.wire.codec import MAX_BATCH as MAX_BATCH
from p2paudit.node.wire.codec import MAX_BATCH_BYTES as MAX_BATCH_BYTES
from p2paudit.node.wire.codec import MAX_EVIDENCE_BYTES as MAX_EVIDENCE_BYTES
from p2paudit.node.wire.codec import MAX_INT as MAX_INT
from p2paudit.node.wire.codec import MAX_NOTE_BYTES as MAX_NOTE_BYTES
from p2paudit.node.wire.codec import MAX_PAGE as MAX_PAGE
from p2paudit.node.wire.codec import MAX_PAGE_BYTES as MAX_PAGE_BYTES
from p2paudit.node.wire.codec import MAX_PROOF_HASHES as MAX_PROOF_HASHES
from p2paudit.node.wire.codec import MAX_RUNS as MAX_RUNS
from p2paudit.node.wire.codec import MAX_STATUS_BYTES as MAX_STATUS_BYTES
from p2paudit.node.wire.codec import MAX_SYNC_REQUEST_BYTES as MAX_SYNC_REQUEST_BYTES
from p2paudit.node.wire.codec import MAX_TEXT as MAX_TEXT
from p2paudit.node.wire.codec import MAX_WITNESS_REQUEST_BYTES as MAX_WITNESS_REQUEST_BYTES
from p2paudit.node.wire.codec import MAX_WITNESS_RESPONSE_BYTES as MAX_WITNESS_RESPONSE_BYTES
from p2paudit.node.wire.codec import MESSAGE_ID_DOMAIN as MESSAGE_ID_DOMAIN
from p2paudit.node.wire.codec import SETTLED_PROTOCOL as SETTLED_PROTOCOL
from p2paudit.node.wire.codec import SYNC_PROTOCOL as SYNC_PROTOCOL
from p2paudit.node.wire.codec import VERSION as VERSION
from p2paudit.node.wire.codec import WITNESS_BAD_PROOF as WITNESS_BAD_PROOF
from p2paudit.node.wire.codec import WITNESS_BAD_SIGNATURE as WITNESS_BAD_SIGNATURE
from p2paudit.node.wire.codec import WITNESS_CODES as WITNESS_CODES
from p2paudit.node.wire.codec import WITNESS_MALFORMED as WITNESS_MALFORMED
from p2paudit.node.wire.codec import WITNESS_OK as WITNESS_OK
from p2paudit.node.wire.codec import WITNESS_OLD_SIZE_MISMATCH as WITNESS_OLD_SIZE_MISMATCH
from p2paudit.node.wire.codec import WITNESS_OLD_SIZE_TOO_LARGE as WITNESS_OLD_SIZE_TOO_LARGE
from p2paudit.node.wire.codec import WITNESS_PROTOCOL as WITNESS_PROTOCOL
from p2paudit.node.wire.codec import WITNESS_ROOT_CONFLICT as WITNESS_ROOT_CONFLICT
from p2paudit.node.wire.codec import WITNESS_UNAVAILABLE as WITNESS_UNAVAILABLE
from p2paudit.node.wire.codec import WITNESS_UNKNOWN_LOG as WITNESS_UNKNOWN_LOG
from p2paudit.node.wire.codec import PeerRefused as PeerRefused
from p2paudit.node.wire.codec import WireError as WireError
from p2paudit.node.wire.codec import check_bin as check_bin
from p2paudit.node.wire.codec import check_fields as check_fields
from p2paudit.node.wire.codec import check_hashes as check_hashes
from p2paudit.node.wire.codec import check_int as check_int
from p2paudit.node.wire.codec import check_list as check_list
from p2paudit.node.wire.codec import check_text as check_text
from p2paudit.node.wire.codec import clip_text as clip_text
from p2paudit.node.wire.codec import pack as pack
from p2paudit.node.wire.codec import unpack_message as unpack_message
from p2paudit.node.wire.protocol import ProtocolSpec as ProtocolSpec
from p2paudit.node.wire.sync import SYNC as SYNC
from p2paudit.node.wire.sync import WITNESS as WITNESS
from p2paudit.node.wire.sync import Page as Page
from p2paudit.node.wire.sync import RangeProof as RangeProof
from p2paudit.node.wire.sync import RangeRequest as RangeRequest
from p2paudit.node.wire.sync import StatusRequest as StatusRequest
from p2paudit.node.wire.sync import StatusResponse as StatusResponse
from p2paudit.node.wire.sync import SyncRefusal as SyncRefusal
from p2paudit.node.wire.sync import SyncRequest as SyncRequest
from p2paudit.node.wire.sync import SyncResponse as SyncResponse
from p2paudit.node.wire.sync import WitnessRequest as WitnessRequest
from p2paudit.node.wire.sync import WitnessResponse as WitnessResponse
from p2paudit.node.wire.sync import decode_sync_request as decode_sync_request
from p2paudit.node.wire.sync import decode_sync_response as decode_sync_response
from p2paudit.node.wire.sync import decode_witness_request as decode_witness_request
from p2paudit.node.wire.sync import decode_witness_response as decode_witness_response
from p2paudit.node.wire.sync import encode_sync_request as encode_sync_request
from p2paudit.node.wire.sync import encode_sync_response as encode_sync_response
from p2paudit.node.wire.sync import encode_witness_request as encode_witness_request
from p2paudit.node.wire.sync import encode_witness_response as encode_witness_response
from p2paudit.node.wire.sync import sync_refusal as sync_refusal
from p2paudit.node.wire.sync import witness_refusal as witness_refusal

ORIGIN_PREFIX = "p2paudit.dev/ledger/"
_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_ED25519_PEER_ID_PREFIX = b"\x00\x24\x08\x01\x12\x20"  # identity multihash of protobuf PublicKey{Ed25519, 32 bytes}


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
    out: list[bytes] = []
    current: list[bytes] = []
    size = 64
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

    def envelopes(self) -> tuple[bytes, bytes]:
        """The two attestation envelopes of a dispute or an equivocation; WireError if they are notes."""
        if isinstance(self.first, bytes) and isinstance(self.second, bytes):
            return self.first, self.second
        raise WireError(f"{self.kind} evidence holds notes, not attestation envelopes")

    def notes(self) -> tuple[str, str]:
        """The two checkpoint notes of a split view; WireError if they are envelopes."""
        if isinstance(self.first, str) and isinstance(self.second, str):
            return self.first, self.second
        raise WireError(f"{self.kind} evidence holds attestation envelopes, not notes")


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


SETTLED = ProtocolSpec(
    SETTLED_PROTOCOL, 0, MAX_SETTLED_BYTES, 5.0, settled_refusal, None, None, encode_settled, decode_settled
)
