"""What the daemon does with its ledger, as jobs for the store's owner thread (node.store_owner).

Each function takes the store first and runs on the one thread that owns the
SQLite connection, never on the event loop: appends commit with fsync and
check signatures, and coverage scans every step. They do no network I/O and
return plain values for the loop to act on (publish, report, ban).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ledger.cosignature import Cosignature
from p2paudit.attest.store import AttestationStore
from p2paudit.audit.records import StepAudit
from p2paudit.identity import Identity
from p2paudit.node import wire
from p2paudit.node.assign import auditor
from p2paudit.node.daemon import conflicts, status
from p2paudit.node.daemon.sources import RunSource
from p2paudit.node.protocols import reconcile, sync, witness


@dataclass
class Ledgered:
    """What lives beside the store on its thread: the sync cursor and the witness (both use the store)."""

    cursor: sync.SyncCursor
    witness: witness.Witness


def setup(store: AttestationStore, identity: Identity, runs: tuple[RunSource, ...]) -> Ledgered:
    for source in runs:
        m = source.manifest
        store.register_run(m.run_id, m.num_steps, source.label, m.public_key)
    reconcile.ensure_index(store)
    signer = witness.witness_signer(identity, store.ledger.origin)
    return Ledgered(sync.SyncCursor(store), witness.Witness(store.ledger, signer))


def register(store: AttestationStore, source: RunSource) -> None:
    store.register_run(source.manifest.run_id, source.manifest.num_steps, source.label, source.manifest.public_key)


def append(store: AttestationStore, envelopes: list[bytes]) -> tuple[int, list[tuple[bytes, str]]]:
    """Append signed attestations: (how many were new, [(envelope, conflict kind)] for new conflicts)."""
    appended = store.append_many(envelopes)
    fresh = [item for item in appended if item.new]
    return len(fresh), [(store.attestation(item.index).encoded, item.conflict) for item in fresh if item.conflict]


def store_evidence(store: AttestationStore, evidence: wire.Evidence, kind: str) -> tuple[str, str, int] | None:
    """Keep checked evidence: its two attestations, or a split view (returned as its (vkey, origin, size))."""
    if kind != "split_view":
        store.append_many(list(evidence.envelopes()))
        return None
    return conflicts.record_split_view(store.ledger, *evidence.notes())


def evidence_for(store: AttestationStore, signed: bytes, kind: str) -> tuple[int, bytes, bytes] | None:
    return conflicts.evidence_for(store, signed, kind)


def split_views(store: AttestationStore) -> list[tuple[tuple[str, str, int], bytes]]:
    """Every split view this ledger holds, as ((vkey, origin, size), evidence message)."""
    views = store.ledger.split_views()
    if not views:
        return []
    messages = witness.split_view_evidence(store.ledger)
    return [((v.vkey, v.origin, v.size), m) for v, m in zip(views, messages, strict=True)]


def pick(
    store: AttestationStore,
    identity: Identity,
    runs: tuple[RunSource, ...],
    peers: list[bytes],
    policy: auditor.AuditPolicy,
    spill: bool,
    avoid: dict[bytes, frozenset[int]],
) -> tuple[RunSource, int] | None:
    """The next (run, step) to replay; `avoid` holds, per run id, steps backed off from for now."""
    for source in runs:
        m = source.manifest
        skip = avoid.get(m.run_id, frozenset())
        step = auditor.next_step(store, m.run_id, m.num_steps, identity.public_key, peers, policy, spill, skip)
        if step is not None:
            return source, step
    return None


def record(
    store: AttestationStore, identity: Identity, source: RunSource, audits: tuple[StepAudit, ...]
) -> tuple[list[bytes], list[tuple[bytes, str]]]:
    """Sign and append one replayed step: (new envelopes to gossip, [(own envelope, kind)] of conflicts)."""
    recorded, signed = auditor.record_step(store, identity, source.manifest, source.label, audits)
    mine = []
    for conflict_step, kind in recorded.conflicts:
        for _, item in store.step_attestations(source.manifest.run_id, conflict_step):
            if item.verifier == identity.public_key:
                mine.append((item.encoded, kind))
    return signed, mine


def covered(store: AttestationStore, runs: tuple[RunSource, ...], policy: auditor.AuditPolicy) -> bool:
    """Every step of every run holds `redundancy` checks (by trusted keys, if any) in this ledger."""
    for view in runs:
        m = view.manifest
        done = auditor.checked_by(store, m.run_id, policy.trusted)
        if any(done.get(step, 0) < policy.redundancy for step in range(m.num_steps)):
            return False
    return True


def serve_sync(store: AttestationStore, identity: Identity, request: bytes) -> bytes:
    return sync.serve_sync(store, request, store.checkpoint(identity))


def witness_request(store: AttestationStore, identity: Identity, old: int) -> tuple[int, str, bytes]:
    """(size, our signed checkpoint note, the add-checkpoint request from `old`) for a witness."""
    note = store.checkpoint(identity)
    return store.ledger.size, note, witness.witness_request(store.ledger, note, old)


def record_peer_note(store: AttestationStore, note: str) -> None:
    conflicts.record_peer_note(store.ledger, note)


def record_cosignature(store: AttestationStore, note: str, cosignature: Cosignature) -> None:
    witness.record_cosignature(store.ledger, note, cosignature)


def size(store: AttestationStore) -> int:
    return store.ledger.size


def checkpoint(store: AttestationStore, identity: Identity) -> str:
    return store.checkpoint(identity)


def write_status(
    store: AttestationStore, identity: Identity, config: Any, runs: list[RunSource], live: dict[str, Any], path: Path
) -> status.Status:
    """Make the status snapshot and write it (no fsync: it is a view of the ledger); returns the snapshot."""
    snap = status.snapshot(store, identity, config, runs, live)
    status.write_status(path, snap)
    return snap
