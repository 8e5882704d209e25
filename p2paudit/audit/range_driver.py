"""The one replay loop: which steps run, from which input, and what each one's verdict is.

Steps are 0-based: step n turns state n into state n + 1. Replaying steps
A..B starts from the nearest checkpoint at or before state A and replays
every step from there (the steps before A are checked too: they produce
step A's input, but only A..B are reported). A range that includes step 0
also rebuilds state 0 from the recipe and compares it (`init`).

The rules, written here once for every way of running a step:

- every published checkpoint of states start..B + 1 is checked before any
  step runs (InputError on any fault);
- a step's verdict: "match" when the input state's step counter is n, the
  batch the schedule draws is the claimed data digest, the replayed state is
  the claimed state n + 1 and the replayed loss is the claimed loss, bit for
  bit; "mismatch" naming each that differs (compare_step);
- after a step whose replayed state is not the published one, its output is
  no published state, so later steps would check nothing: each gets the
  verdict "error" without running, until the next checkpoint re-anchors the
  replay at a published state.

How a step runs is a StepRunner's: in memory (audit.replay), streamed from
file to file (audit.streamed_replay), or one rank of a distributed replay
(audit.distributed_replay, an in-memory runner whose step is that rank's).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol, TypedDict

import numpy as np

from p2paudit.audit.diagnosis import Diagnosis, differing_names
from p2paudit.audit.records import ERROR, INIT, MATCH, MISMATCH, StepAudit, same_loss
from p2paudit.audit.run_view import RangeReport, RunView, StepRange
from p2paudit.engine import ENGINE_VERSION
from p2paudit.engine.progress import ProgressHook
from p2paudit.engine.state import init_state
from p2paudit.run.digest import StateDigest, digest_state, format_digest
from p2paudit.run.manifest_body import StepRecord
from p2paudit.run.training import progress_for_step


@dataclass(frozen=True)
class StepOutcome:
    """What running one step gave: the input's step counter, the batch's digest, the new state's
    digest and the loss; `diagnose()` explains a state mismatch (None when the runner does not)."""

    counter: int
    data_digest: bytes
    output: StateDigest
    loss: np.float32
    diagnose: Callable[[], Diagnosis | None]


class StepRunner(Protocol):
    """Runs steps one after another, each from the previous one's output unless re-anchored."""

    def begin(self, start: int, last_state: int) -> None:
        """Check every published checkpoint of states start..last_state against the manifest (InputError
        before any result), and take the published state `start` as the next step's input."""

    def anchor(self, n: int) -> None:
        """Take the published state n as the next step's input."""

    def replay(self, n: int, progress: ProgressHook | None) -> StepOutcome:
        """Run step n from the current input; its output becomes the next step's input."""


def drive_range(
    view: RunView,
    steps: StepRange,
    backend: str,
    runner: StepRunner,
    on_audit: Callable[[StepAudit], None] | None = None,
    *,
    progress: ProgressHook | None = None,
) -> tuple[tuple[StepAudit, ...], tuple[Diagnosis, ...]]:
    """The audits of `steps` (the initial state first if steps.init) and a diagnosis for each state
    mismatch the runner explains; each audit goes to `on_audit` as soon as it is made, and each of
    the runner's progress events to `progress` with its `step` filled in."""
    m = view.manifest
    start = m.nearest_checkpoint(steps.first) if steps.first is not None else 0
    if steps.first is not None and steps.last is not None:
        runner.begin(start, steps.last + 1)  # every file checked before any result
    audits: list[StepAudit] = []
    if steps.init:
        audits.append(audit_initial_state(view))
        if on_audit is not None:
            on_audit(audits[-1])
    if steps.first is None or steps.last is None:
        return tuple(audits), ()
    unanchored = ""  # why the next step's input is not the published state; empty while it is
    diagnoses = []
    for n in range(start, steps.last + 1):
        if unanchored and n in m.checkpoints:
            runner.anchor(n)
            unanchored = ""
        began = time.perf_counter()
        if unanchored:  # running it would check nothing: its input is not the claimed one
            audit, diagnosis = unanchored_audit(view, n, backend, unanchored), None
        else:
            outcome = runner.replay(n, progress_for_step(progress, n))
            audit = judge_step(view, n, backend, outcome)
            explain = "state" in audit.findings and n >= steps.first
            diagnosis = outcome.diagnose() if explain else None
            del outcome  # it may hold the step's input and output states: never into the next step
            if audit.observed_digest != audit.claimed_digest:
                unanchored = f"input is not the published state {n + 1} (step {n} mismatched)"
        audit = replace(audit, seconds=time.perf_counter() - began)
        if n >= steps.first:
            audits.append(audit)
            diagnoses += [diagnosis] if diagnosis is not None else []
            if on_audit is not None:
                on_audit(audit)
    return tuple(audits), tuple(diagnoses)


def report_range(
    view: RunView,
    steps: StepRange,
    backend: str,
    runner: StepRunner,
    on_audit: Callable[[StepAudit], None] | None,
    replay: str,
    progress: ProgressHook | None,
) -> RangeReport:
    """drive_range's audits and diagnoses as a RangeReport of the `replay` kind."""
    audits, diagnoses = drive_range(view, steps, backend, runner, on_audit, progress=progress)
    return RangeReport(audits, diagnoses, replay)


def audit_initial_state(view: RunView) -> StepAudit:
    """Rebuild state 0 from the recipe (config, seed; init uses no kernel backend) and compare its
    digest with the claimed state 0."""
    m = view.manifest
    began = time.perf_counter()
    observed = digest_state(init_state(view.cfg)).digest
    claimed = m.initial_state.digest
    same = observed == claimed
    note = "" if same else "the claimed state 0 is not what the recipe (config, seed) builds"
    return StepAudit(
        run_id=m.run_id,
        step=0,
        input_digest=None,
        claimed_data=None,
        observed_data=None,
        claimed_digest=claimed,
        observed_digest=observed,
        claimed_loss=None,
        observed_loss=None,
        findings=() if same else ("init",),
        verdict=MATCH if same else MISMATCH,
        backend="recipe",
        seconds=time.perf_counter() - began,
        note=note,
        engine_version=ENGINE_VERSION,
        arithmetic_version=m.arithmetic,
        subject=INIT,
    )


class ClaimedFields(TypedDict):
    """The StepAudit fields of a step known before it runs."""

    run_id: bytes
    step: int
    input_digest: bytes | None
    claimed_data: bytes | None
    claimed_digest: bytes
    claimed_loss: float | None
    backend: str
    seconds: float
    engine_version: str
    arithmetic_version: int


def audit_base(view: RunView, n: int, backend: str) -> ClaimedFields:
    """The StepAudit fields of step n known before it runs (what the manifest claims)."""
    m = view.manifest
    record = m.steps[n]
    return ClaimedFields(
        run_id=m.run_id,
        step=n,
        input_digest=m.state_digest(n).digest,
        claimed_data=record.data_digest,
        claimed_digest=record.output.digest,
        claimed_loss=record.loss,
        backend=backend,
        seconds=0.0,
        engine_version=ENGINE_VERSION,
        arithmetic_version=m.arithmetic,
    )


def unanchored_audit(view: RunView, n: int, backend: str, reason: str) -> StepAudit:
    """Step n not run: its input is not the published state n (`reason` says why)."""
    base = audit_base(view, n, backend)
    return StepAudit(
        **base, observed_data=None, observed_digest=None, observed_loss=None, findings=(), verdict=ERROR, note=reason
    )


def judge_step(view: RunView, n: int, backend: str, outcome: StepOutcome) -> StepAudit:
    """Step n's audit from what replaying it gave: "match", or "mismatch" with its findings and notes."""
    audit = StepAudit(
        **audit_base(view, n, backend),
        observed_data=outcome.data_digest,
        observed_digest=outcome.output.digest,
        observed_loss=float(outcome.loss),
        findings=(),
        verdict=MATCH,
    )
    claimed = view.manifest.steps[n]
    differing = differing_names(claimed.output, outcome.output)
    findings, notes = compare_step(n, claimed, outcome, len(differing))
    return replace(audit, findings=findings, verdict=MISMATCH if findings else MATCH, note="; ".join(notes))


def compare_step(
    n: int, claimed: StepRecord, outcome: StepOutcome, tensors_differing: int
) -> tuple[tuple[str, ...], list[str]]:
    """(findings in FINDINGS order, one note for each) for step n's replay against its manifest record."""
    findings, notes = [], []
    observed_loss = float(outcome.loss)  # as the StepAudit holds it
    if outcome.counter != n:
        findings.append("counter")
        notes.append(f"the input state's step counter is {outcome.counter}, not {n}")
    if outcome.data_digest != claimed.data_digest:
        findings.append("data")
        notes.append(
            f"data digest {format_digest(outcome.data_digest)} is not the claimed "
            f"{format_digest(claimed.data_digest)}: the claim used another slice of data"
        )
    if outcome.output.digest != claimed.output.digest:
        findings.append("state")
        notes.append(f"{tensors_differing} tensor(s) differ")
    if not same_loss(observed_loss, claimed.loss):
        findings.append("loss")
        notes.append(f"loss {observed_loss!r} is not the claimed {claimed.loss!r}")
    return tuple(findings), notes
