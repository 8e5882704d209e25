"""Replay a range of steps of a published run in memory and compare every part of its claim.

The loop, its re-anchoring and its verdict rules are audit.range_driver's
(read its docstring for what a "match" means); here is the in-memory
StepRunner: a whole state is held, every checkpoint the range touches is
loaded and checked before any step runs, each step runs through a step
function (one process by default; one rank's share of a distributed step in
audit.distributed_replay), and a state mismatch is diagnosed by tracing the
step on two backends and bisecting the traces (and the published trace, if any).

The records and checks every replay shares (RunView, open_run, StepRange,
parse_step_range, RangeReport, ...) live in audit.run_view and are importable
from here too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kernels.host_heap import release_freed_memory
from p2paudit.audit.diagnosis import (
    Diagnosis,
    TensorDiff,
    compare_states,
    conclude,
    differing_names,
    first_divergence,
)
from p2paudit.audit.range_driver import (
    StepOutcome,
    audit_base,
    audit_initial_state,
    compare_step,
    report_range,
)
from p2paudit.audit.records import StepAudit
from p2paudit.audit.run_view import (
    INIT_RANGE,
    RangeReport,
    RunView,
    StepRange,
    check_publisher,
    check_replay_fits,
    open_run,
    parse_step_range,
)
from p2paudit.engine.backends import load_backend, single_process_step
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.progress import ProgressHook
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.step import StepResult
from p2paudit.errors import InternalError
from p2paudit.run.digest import digest_batch, digest_state
from p2paudit.run.traces import TraceRecorder, load_trace

__all__ = [
    "INIT_RANGE",
    "InMemoryRunner",
    "RangeReport",
    "RunView",
    "StepRange",
    "audit_base",
    "audit_initial_state",
    "check_checkpoints",
    "check_publisher",
    "check_replay_fits",
    "compare_step",
    "diagnose_step",
    "open_run",
    "parse_step_range",
    "second_backend",
    "verify_range",
]

StepFactory = Callable[[TrainConfig, str, int], Callable[..., StepResult]]


def check_checkpoints(view: RunView, first_state: int, last_state: int) -> dict[str, np.ndarray]:
    """Load and check every checkpoint of states first_state..last_state against the manifest.

    Precondition: first_state is a checkpointed state; its state is returned
    (the others are dropped after their check: at most two are held at once).
    """
    first: dict[str, np.ndarray] = {}
    for c in view.manifest.checkpoints:
        if first_state <= c <= last_state:
            state = view.load_state(c)
            first = state if c == first_state else first
    return first


def second_backend(backend: str) -> str:
    """The backend a mismatch is bisected against: reference, or cpu when replaying with reference."""
    return "cpu" if backend == "reference" else "reference"


class InMemoryRunner:
    """range_driver.StepRunner holding the whole state: step_factory(cfg, backend, arithmetic)(state, batch) per step;
    a state mismatch is bisected against `against` (None: not diagnosed)."""

    def __init__(self, view: RunView, backend: str, step_factory: StepFactory, against: str | None) -> None:
        self._view, self._backend, self._factory, self._against = view, backend, step_factory, against
        self._step: Callable[..., StepResult] | None = None
        self._state: dict[str, np.ndarray] = {}

    def begin(self, start: int, last_state: int) -> None:
        arithmetic = self._view.manifest.arithmetic
        self._step = self._factory(self._view.cfg, self._backend, arithmetic)
        if self._against is not None:
            load_backend(self._against, arithmetic)
        self._state = check_checkpoints(self._view, start, last_state)

    def anchor(self, n: int) -> None:
        self._state = self._view.load_state(n)

    def replay(self, n: int, progress: ProgressHook | None) -> StepOutcome:
        view, state, step = self._view, self._state, self._step
        if step is None:
            raise InternalError("InMemoryRunner.replay before begin")
        batch = batch_for_step(view.tokens, view.manifest.data.data_key, view.cfg, n)  # (M, B, T+1)
        result = step(state, batch) if progress is None else step(state, batch, progress=progress)
        self._state = result.state
        backend, against = self._backend, self._against

        def diagnose() -> Diagnosis | None:
            if against is None:
                return None
            return diagnose_step(view, n, state, batch, result.state, backend, against)

        return StepOutcome(int(state["step"]), digest_batch(batch), digest_state(result.state), result.loss, diagnose)


def verify_range(
    view: RunView,
    steps: StepRange,
    backend: str,
    on_audit: Callable[[StepAudit], None] | None = None,
    diagnose: bool = True,
    against: str | None = None,
    step_factory: StepFactory = single_process_step,
    *,
    progress: ProgressHook | None = None,
) -> RangeReport:
    """Check `steps` with `backend` in memory: the initial state if steps.init, then one StepAudit per step
    (audit.range_driver's rules).

    Each step runs through `step_factory(cfg, backend, arithmetic)(state, batch)`: one process
    by default; audit.distributed_replay passes the step of one rank of a process
    group, and every rank then runs this same function in lock-step.
    A mismatching step is diagnosed (unless `diagnose` is false) by tracing it
    on `backend` and on `against` (default: second_backend(backend)), on one process.
    `progress` gets the step core's events (engine.progress) with `step` set;
    the step function is then called with progress=.
    """
    other = (against or second_backend(backend)) if diagnose else None
    runner = InMemoryRunner(view, backend, step_factory, other)
    return report_range(view, steps, backend, runner, on_audit, "in-memory", progress)


def diagnose_step(
    view: RunView,
    n: int,
    state: dict[str, np.ndarray],
    batch: np.ndarray,
    observed_state: dict[str, np.ndarray],
    backend: str,
    other: str,
) -> Diagnosis:
    """Name the differing tensors, measure them against the claimed checkpoint if there is one,
    and bisect the step's trace on two backends (and against the published trace, if any).

    Precondition: `state` is the published state n and step n's replay mismatched.
    """
    m = view.manifest
    claimed = m.steps[n].output
    names = differing_names(claimed, digest_state(observed_state))
    diffs: tuple[TensorDiff, ...] = ()
    if n + 1 in m.checkpoints:
        claimed_state = view.load_state(n + 1)
        diffs = compare_states(claimed_state, observed_state, list(names))
    traces = {b: _trace_step(view, state, batch, b) for b in (backend, other)}
    divergences = [first_divergence(backend, traces[backend], other, traces[other])]
    trace = m.steps[n].trace
    if trace is not None:
        published = load_trace(view.run_dir, n, trace)
        divergences.append(first_divergence(backend, traces[backend], "published trace", published))
    return Diagnosis(n, names, diffs, tuple(divergences), conclude(tuple(divergences), (backend, other)))


def _trace_step(
    view: RunView, state: dict[str, np.ndarray], batch: np.ndarray, backend: str
) -> list[tuple[str, bytes]]:
    recorder = TraceRecorder()
    single_process_step(view.cfg, backend, view.manifest.arithmetic)(state, batch, recorder)
    return recorder.ops


def release_replay_memory() -> bool:
    """Give the memory a finished replay freed back to the system, for a process going idle (a daemon with
    no step to replay): host backends keep freed blocks in the heap to reuse them step after step
    (kernels/host_heap.py), so without this an idle daemon holds the peak of its last replay. False where
    the C library cannot (not glibc)."""
    return release_freed_memory()
