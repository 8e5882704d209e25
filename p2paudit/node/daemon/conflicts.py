"""Conflicts as evidence: build the message that proves a dispute or an equivocation, and keep split views.

Over the store, no network: the daemon publishes what `evidence_for` builds
on the evidence topic, and records the checkpoints peers show it here, so two
heads of one size with different roots end up as split-view evidence
(`ledger.split_views()`), whichever way they arrived.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ledger import Ledger, NoteVerifier, open_checkpoint
from ledger.errors import ProofError
from ledger.peers import SPLIT_VIEW, insert_checkpoint
from p2paudit.attest.queries import check_dispute, check_equivocation
from p2paudit.attest.record import decode_signed
from p2paudit.attest.store import AttestationStore
from p2paudit.node import wire


def evidence_for(store: AttestationStore, signed: bytes, kind: str) -> tuple[int, bytes, bytes] | None:
    """(step, run id, evidence message) pairing `signed` with a stored attestation it conflicts with as
    `kind` ("dispute" or "equivocation"); None when the store holds no such counterpart."""
    record = decode_signed(signed).attestation
    check = check_dispute if kind == "dispute" else check_equivocation
    for _, other in store.step_attestations(record.run_id, record.step):
        if other.encoded != signed and check(signed, other.encoded):
            return record.step, record.run_id, wire.encode_evidence(wire.Evidence(kind, other.encoded, signed))
    return None


def _verifier(note: str) -> NoteVerifier:
    origin = note.split("\n", 1)[0]
    return NoteVerifier(origin, wire.origin_public_key(origin))


def record_split_view(ledger: Ledger, first: str, second: str) -> tuple[str, str, int]:
    """Keep two notes of one size with different roots (already checked by validate.check_evidence) as
    split-view evidence; returns (vkey, origin, size), the key under which the view is announced."""
    verifier = _verifier(first)
    for note in (first, second):
        try:
            ledger.add_peer_checkpoint(note, verifier, [])
        except ProofError:  # no consistency proof with what we hold: kept all the same, as evidence
            now = datetime.now(UTC).isoformat(timespec="seconds")
            with ledger.transaction() as tx:
                insert_checkpoint(
                    tx.conn, "peer", SPLIT_VIEW, open_checkpoint(note, [verifier]), verifier.vkey, note, now
                )
    cp = open_checkpoint(first, [verifier])
    return verifier.vkey, cp.origin, cp.size


def record_peer_note(ledger: Ledger, note: str) -> None:
    """Keep a peer's checkpoint from its status handshake (already verified): a second root at a size held
    is a split view. Growth needs a consistency proof, which the witness protocol carries; not kept here."""
    try:
        ledger.add_peer_checkpoint(note, _verifier(note), [])
    except ProofError:
        pass
