"""Replaying steps of a lab run (run.lab_run) under the lab mode, each from its published checkpoint.

Each step's verdict keeps the three findings apart: the torch build (refused before anything runs when
it is not the run's), the op graph (the dataflow trace; its first departing op), the state (the tensors
that differ; with value traces, the first op whose outputs differ, or that none did: the claim's fault).

`lab_audits` gives them as StepAudits, the records every run's audits are (verify-range prints them,
--attest and the daemon sign them). A lab step's audit names what it checked (docs/attestation.md,
"Lab runs"):

    input_digest                  the published state n (the checkpoint the replay started from)
    claimed / observed data       the claimed trace digest of step n / the replay's: finding "data"
                                  means the op sequence differs (the note names its first departing op)
    claimed / observed digest     the claimed state n + 1 / the replay's: finding "state"
    claimed / observed loss       0.0 on both sides: a lab run claims no loss (its attestation's loss
                                  pair asserts nothing)
    backend                       "lab-" + the run's backend; engine_version names the lab mode, its op
                                  table and the torch version

Step 0 is preceded by the audit of state 0 (subject "init"): the script's build() rebuilt and digested.
Every state of a lab run is published, so every step replays from a published state: no "error".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from p2paudit.audit.lab_isolation import ChildOutput, replay_in_child
from p2paudit.audit.lab_sandbox import sandbox_off
from p2paudit.audit.records import INIT, MATCH, MISMATCH, StepAudit
from p2paudit.errors import InputError
from p2paudit.lab import ReplayVerdict, judge_replay, torch_build
from p2paudit.lab.script import check_build, check_torch_build
from p2paudit.run.lab_run import LabManifest, LabRunView, open_lab_run

NO_LOSS = 0.0  # a lab run claims no loss: both sides of a lab audit's loss pair


def verify_lab_steps(run_dir: Path, first: int, last: int) -> tuple[bytes, list[ReplayVerdict]]:
    """(the publisher's public key, the verdicts of steps first..last), each replayed from its checkpoint in a
    child process (audit.lab_isolation) and judged here."""
    view = open_lab_run(run_dir)
    if not 0 <= first <= last < view.num_steps:
        raise InputError(f"steps {first}..{last} are not in the run (it has steps 0..{view.num_steps - 1})")
    check_torch_build(view.claims)
    verdicts = []
    for n, out in replay_in_child(view, False, range(first, last + 1)):
        if n is not None:
            verdicts.append(judge_replay(view.claims, n, out.state, out.ops, out.values))
    return view.public_key, verdicts


def check_lab_build(view: LabRunView) -> None:
    """TorchBuildMismatch (exit 2, one line naming both builds) unless this process runs the run's torch
    build: a daemon refuses such a run when it opens it, rather than failing every step."""
    check_torch_build(view.claims)


def check_manifest_build(manifest: LabManifest) -> None:
    """check_lab_build from the checked manifest alone: before a remote run's files are fetched."""
    check_build(manifest.torch_build)


def lab_engine_version(view: LabRunView) -> str:
    """What replayed a lab step, as an audit's engine_version (at most 64 printable characters): the lab
    mode, its op table, whether the script ran sandboxed (audit.lab_sandbox; "unsandboxed" under
    P2PAUDIT_LAB_SANDBOX=none, where the script could read the claimed states) and this process's torch
    build (which check_torch_build holds equal to the run's)."""
    confined = "unsandboxed" if sandbox_off() else "sandboxed"
    return f"p2paudit-lab op-table {view.claims.op_table_version} {confined} {torch_build()}"[:64]


def _init_audit(view: LabRunView, out: ChildOutput, seconds: float) -> StepAudit:
    claimed = view.claims.initial.digest
    observed = out.state.digest
    same = observed == claimed
    return StepAudit(
        run_id=view.run_id, step=0, input_digest=None, claimed_data=None, observed_data=None,
        claimed_digest=claimed, observed_digest=observed, claimed_loss=None, observed_loss=None,
        findings=() if same else ("init",), verdict=MATCH if same else MISMATCH, backend="lab-recipe",
        seconds=seconds,
        note="" if same else "the claimed state 0 is not what the script's build() makes",
        engine_version=lab_engine_version(view), arithmetic_version=view.claims.arithmetic_version, subject=INIT,
    )  # fmt: skip


def _step_audit(view: LabRunView, n: int, out: ChildOutput, seconds: float) -> StepAudit:
    claims = view.claims
    verdict = judge_replay(claims, n, out.state, out.ops, out.values)
    findings = (() if verdict.trace_matches else ("data",)) + (() if verdict.state_matches else ("state",))
    before = claims.initial if n == 0 else claims.states[n - 1]
    return StepAudit(
        run_id=view.run_id, step=n, input_digest=before.digest,
        claimed_data=claims.traces[n], observed_data=verdict.observed_trace,
        claimed_digest=claims.states[n].digest, observed_digest=verdict.observed_state,
        claimed_loss=NO_LOSS, observed_loss=NO_LOSS, findings=findings,
        verdict=MISMATCH if findings else MATCH, backend=f"lab-{claims.backend}",
        seconds=seconds, note="; ".join(verdict.findings),
        engine_version=lab_engine_version(view), arithmetic_version=claims.arithmetic_version,
    )  # fmt: skip


def lab_audits(
    view: LabRunView,
    init: bool,
    steps: range,
    on_audit: Callable[[StepAudit], None] | None = None,
) -> tuple[StepAudit, ...]:
    """The audits of state 0 (when `init`) and of `steps`, in that order, each handed to `on_audit` as
    soon as it is made. TorchBuildMismatch (exit 2) before anything runs under another torch build;
    InputError for steps outside the run."""
    if steps and not 0 <= steps[0] <= steps[-1] < view.num_steps:
        raise InputError(f"steps {steps[0]}..{steps[-1]} are not in the run (it has steps 0..{view.num_steps - 1})")
    untraced = [n for n in steps if n not in view.traced]
    if untraced:
        raise InputError(f"step {untraced[0]}'s trace was not read with the run (this view holds steps {view.traced})")
    check_torch_build(view.claims)
    audits: list[StepAudit] = []
    began = time.perf_counter()
    for n, out in replay_in_child(view, init, steps):
        seconds = time.perf_counter() - began
        audits.append(_init_audit(view, out, seconds) if n is None else _step_audit(view, n, out, seconds))
        if on_audit is not None:
            on_audit(audits[-1])
        began = time.perf_counter()
    return tuple(audits)
