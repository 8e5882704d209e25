"""Judging gossip before it is forwarded: only what needs no local state, and never an exception.

`check_gossip` raises InputError naming the fault when the peer's bytes are
bad, and lets any other exception through: that one is our bug, and the
adapter logs it and drops the message without blaming the peer.
`validate_gossip` is the same check as a bool that never raises (for
benchmarks and callers that only need the answer). They check the size,
the canonical decoding of the message and of every attestation, every
signature, and that each attestation's run is the run the topic names.
State-dependent rules (unknown run or step, conflicts, duplicates) apply
when the batch is stored (AttestationStore.append_many).

Evidence is checked from its bytes alone: two signed attestations that are a
dispute or an equivocation (attest.queries), or two checkpoint notes signed by
the key their origin names, of one size, with different roots.
"""

from __future__ import annotations

from ledger import Checkpoint, NoteVerifier, open_checkpoint
from ledger.errors import CheckpointError
from p2paudit.attest.queries import check_dispute, check_equivocation
from p2paudit.attest.record import decode_signed
from p2paudit.errors import InputError
from p2paudit.node.wire import (
    EVIDENCE_TOPIC,
    MAX_BATCH_BYTES,
    MAX_EVIDENCE_BYTES,
    GossipBatch,
    WireError,
    decode_batch,
    decode_evidence,
    origin_public_key,
    topic_run_id,
)


def check_batch(topic: str, data: bytes) -> GossipBatch:
    """The batch if it is well formed, fully signed and of the topic's run; InputError naming the first fault."""
    run_id = topic_run_id(topic)
    batch = decode_batch(data)
    if batch.run_id != run_id:
        raise WireError(f"batch is for run {batch.run_id.hex()[:16]}.. on the topic of run {run_id.hex()[:16]}..")
    for n, item in enumerate(batch.envelopes):
        record = decode_signed(item).attestation
        if record.run_id != run_id:
            raise WireError(
                f"batch item {n} attests run {record.run_id.hex()[:16]}.., the batch is for {run_id.hex()[:16]}.."
            )
    return batch


def check_gossip(topic: str, data: bytes) -> None:
    """Return if `data` may be forwarded on `topic` (a run topic or the evidence topic); InputError naming
    the peer's fault otherwise. Any other exception is a bug here, never the peer's doing."""
    limit = MAX_EVIDENCE_BYTES if topic == EVIDENCE_TOPIC else MAX_BATCH_BYTES
    if len(data) > limit:
        raise WireError(f"gossip message of {len(data)} bytes exceeds {limit} on {topic[:80]}")
    if topic == EVIDENCE_TOPIC:
        check_evidence(bytes(data))
    else:
        check_batch(topic, bytes(data))


def validate_gossip(topic: str, data: bytes) -> bool:
    """True iff `data` may be forwarded on `topic` (a run topic or the evidence topic). Never raises."""
    try:
        if type(data) not in (bytes, bytearray, memoryview):
            return False
        check_gossip(topic, data)
        return True
    except Exception:  # noqa: BLE001 (the contract: any fault is a False)
        return False


def check_split_view(first: str, second: str) -> bool:
    """True iff the two notes are checkpoints of one origin and size with different roots, both signed by the key
    that origin names. Raises InputError or CheckpointError for malformed or badly signed notes."""
    origin = first.split("\n", 1)[0]
    verifier = NoteVerifier(origin, origin_public_key(origin))
    a: Checkpoint = open_checkpoint(first, [verifier])
    b: Checkpoint = open_checkpoint(second, [verifier])
    return a.origin == b.origin and a.size == b.size and a.root != b.root


def check_evidence(data: bytes) -> str:
    """The kind of conflict the evidence message proves from its bytes alone; InputError if it proves none."""
    evidence = decode_evidence(data)
    try:
        if evidence.kind == "dispute":
            holds = check_dispute(*evidence.envelopes())
        elif evidence.kind == "equivocation":
            holds = check_equivocation(*evidence.envelopes())
        else:
            holds = check_split_view(*evidence.notes())
    except CheckpointError as exc:
        raise WireError(f"split-view evidence refused: {exc}") from None
    if not holds:
        raise InputError(f"evidence says {evidence.kind} but its two signed statements are not one")
    return evidence.kind
