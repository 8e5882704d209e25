"""Record a verifier's step audits in its ledger as signed attestations.

This is what `verify-range --attest` and `demo` do after a replay: make the run
known (from its checked manifest), then sign one attestation per audited step
with the node key and append it, check and append in one transaction each, so
a node never signs two different results for one step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from p2paudit.attest.audits import attestation_from_audit, describe_hardware
from p2paudit.attest.store import Appended, AttestationStore, now_ms
from p2paudit.audit.records import INIT, StepAudit
from p2paudit.identity import Identity


@dataclass(frozen=True)
class Recorded:
    """What recording a range did: the ledger index of each step's attestation, and how many were new."""

    indices: tuple[int, ...]
    new: int
    conflicts: tuple[tuple[int, str], ...]  # (step, "dispute" | "equivocation") for new entries

    @property
    def first(self) -> int | None:
        return min(self.indices) if self.indices else None


def record_audits(
    store: AttestationStore,
    identity: Identity,
    run_id: bytes,
    num_steps: int,
    label: str,
    audits: Sequence[StepAudit],
    hardware: str | None = None,
) -> Recorded:
    """Register the run (idempotent) and sign-and-append one attestation per audit (the initial
    state's included, as a v2 record of subject "init"), in step order, init first.

    Preconditions: `run_id` and `num_steps` come from a manifest whose
    signature was checked (the audit did that). Raises AttestationError, and
    stores nothing for that step, if this node already signed a different
    result for it.
    """
    store.register_run(run_id, num_steps, label)
    where = describe_hardware() if hardware is None else hardware
    appended: list[tuple[int, Appended]] = []
    # init (state 0) before step 0: both carry step 0, and the ledger should read in claim order.
    for audit in sorted(audits, key=lambda a: (a.step, a.subject != INIT)):
        record = attestation_from_audit(audit, identity.public_key, now_ms(), where)
        appended.append((audit.step, store.sign_and_append(identity, record)))
    return Recorded(
        indices=tuple(a.index for _, a in appended),
        new=sum(1 for _, a in appended if a.new),
        conflicts=tuple((step, a.conflict) for step, a in appended if a.new and a.conflict),
    )
