"""Record a verifier's step audits in its ledger as signed attestations.

This is what `verify-range --attest` and `demo` do after a replay: make the run
known (from its checked manifest), then sign one attestation per audited step
with the node key and append it, check and append in one transaction each, so
a node never signs two different results for one step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ledger import LedgerError
from p2paudit.attest.audits import attestation_from_audit, describe_hardware
from p2paudit.attest.errors import AttestationError, RecordingStopped
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
    publisher: bytes | None = None,
) -> Recorded:
    """Register the run (idempotent) and sign-and-append one attestation per audit (the initial
    state's included, as a v2 record of subject "init"), in step order, init first.

    Preconditions: `run_id`, `num_steps` and `publisher` (the key that signed it, recorded with the run)
    come from a manifest whose signature was checked (the audit did that). Raises AttestationError, and
    stores nothing for that step, if this node already signed a different
    result for it. Each attestation is its own transaction: when one is
    refused (that equivocation, a full disk) after others were stored,
    RecordingStopped says exactly which were stored and which were not.
    """
    store.register_run(run_id, num_steps, label, publisher)
    where = describe_hardware() if hardware is None else hardware
    appended: list[tuple[StepAudit, Appended]] = []
    # init (state 0) before step 0: both carry step 0, and the ledger should read in claim order.
    ordered = sorted(audits, key=lambda a: (a.step, a.subject != INIT))
    for audit in ordered:
        record = attestation_from_audit(audit, identity.public_key, now_ms(), where)
        try:
            appended.append((audit, store.sign_and_append(identity, record)))
        except (AttestationError, LedgerError) as exc:
            if not appended:
                raise
            raise RecordingStopped(_stopped_message(appended, audit, len(ordered), exc)) from exc
    return Recorded(
        indices=tuple(a.index for _, a in appended),
        new=sum(1 for _, a in appended if a.new),
        conflicts=tuple((audit.step, a.conflict) for audit, a in appended if a.new and a.conflict),
    )


def _subject(audit: StepAudit) -> str:
    return "the initial state" if audit.subject == INIT else f"step {audit.step}"


def _ranges(numbers: list[int]) -> str:
    """'0-3, 7, 9-10' for [0, 1, 2, 3, 7, 9, 10]."""
    spans: list[list[int]] = []
    for n in sorted(numbers):
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans)


def _stopped_message(stored: list[tuple[StepAudit, Appended]], refused: StepAudit, total: int, exc: Exception) -> str:
    """What is in the ledger and what is not, after `refused` was refused with `exc`."""
    subjects = [("initial state" if a.subject == INIT else None, a.step) for a, _ in stored]
    steps = [step for name, step in subjects if name is None]
    parts = (["the initial state"] if any(name for name, _ in subjects) else []) + (
        [f"step{'s' if len(steps) > 1 else ''} {_ranges(steps)}"] if steps else []
    )
    entries = _ranges([a.index for _, a in stored])
    return (
        f"{len(stored)} of {total} attestations are stored ({' and '.join(parts)}: ledger "
        f"entr{'ies' if len(stored) > 1 else 'y'} {entries}); {_subject(refused)} and the "
        f"{total - len(stored) - 1} after it are not: {exc}"
    )
