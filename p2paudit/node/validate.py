"""Judging gossip before it is forwarded: only what needs no local state, and never an exception.

py-libp2p's topic validator may only answer True or False, and a sync
validator that raises kills the pubsub service (see the py-libp2p notes), so
`validate_gossip` catches everything and returns False. It checks the size,
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


def validate_gossip(topic: str, data: bytes) -> bool:
    """True iff `data` may be forwarded on `topic` (a run topic or the evidence topic). Never raises."""
    try:
        if type(data) not in (bytes, bytearray, memoryview) or len(data) > max(MAX_BATCH_BYTES, MAX_EVIDENCE_BYTES):
            return False
        if topic == EVIDENCE_TOPIC:
            check_evidence(bytes(data))
        else:
            check_batch(topic, bytes(data))
        return True
    except Exception:  # noqa: BLE001 (the contract: any fault is a False, never an exception into libp2p)
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
            holds = check_dispute(evidence.first, evidence.second)
        elif evidence.kind == "equivocation":
            holds = check_equivocation(evidence.first, evidence.second)
        else:
            holds = check_split_view(evidence.first, evidence.second)
    except CheckpointError as exc:
        raise WireError(f"split-view evidence refused: {exc}") from None
    if not holds:
        raise InputError(f"evidence says {evidence.kind} but its two signed statements are not one")
    return evidence.kind
