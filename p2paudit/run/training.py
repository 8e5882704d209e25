"""The publisher's step loop, written once: run the steps after those recorded, record each, checkpoint
every K-th.

`train_steps_with` holds the loop and the checkpoint policy (`checkpointed`);
how a step runs and where its state lives is a TrainStepper's: the whole
state in memory (`InMemoryStepper`, here: the one-process publisher,
`run.publisher`, and its ranks on W processes, `run.workers`, so both write
the same files in the same order), or streamed from one checkpoint file to
the next (run.streamed_training).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from kernels import ARITHMETIC_VERSION as ARITHMETIC_VERSION  # re-exported: train reads the default here
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.progress import ProgressHook
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.step import StepResult
from p2paudit.run.checkpoint import save_checkpoint
from p2paudit.run.digest import StateDigest, digest_batch, digest_bytes, digest_state
from p2paudit.run.manifest_body import StepRecord, canonical_json
from p2paudit.run.shards import DataSpec
from p2paudit.run.storage import write_atomic
from p2paudit.run.traces import TraceRecorder, encode_trace, trace_path

PROGRESS_FILE = "progress.json"


@dataclass(frozen=True)
class TrainPlan:
    """What to train: config name and geometry, number of steps, checkpoint spacing, how to compute."""

    run_dir: Path
    config: str = "tiny"
    steps: int = 8
    micro_batches: int | None = None
    seed: int = 0
    ckpt_every: int = 1
    world_size: int = 1
    backend: str = "cpu"
    traces: bool = False  # also publish every step's operation trace (one process only)
    arithmetic: int = ARITHMETIC_VERSION  # docs/arithmetic.md: 2 (fused folds) for new runs, 1 still allowed


@dataclass(frozen=True)
class StepDone:
    """Progress report for one finished step (handed to the caller's callback)."""

    step: int
    steps: int
    loss: float
    resumed_from: int  # the state index this session started from


@dataclass(frozen=True)
class Stepped:
    """What a TrainStepper's step gave: the loss, the new state's digest and the published trace's
    digest (both None on a process that writes nothing)."""

    loss: np.float32
    output: StateDigest | None
    trace: bytes | None


class TrainStepper(Protocol):
    """Runs the steps of a run one after another, each from the previous one's state."""

    def step(self, n: int, batch: np.ndarray, checkpoint: bool, progress: ProgressHook | None) -> Stepped:
        """Step n on `batch`; with `checkpoint`, state n + 1 is in its published checkpoint when this returns."""


def checkpointed(state: int, plan: TrainPlan) -> bool:
    """Whether state `state` (> 0) is published as a checkpoint: every K-th, and the last."""
    return state % plan.ckpt_every == 0 or state == plan.steps


def progress_for_step(progress: ProgressHook | None, n: int) -> ProgressHook | None:
    """`progress` with each event's `step` set to n (None stays None: a hook costs nothing when absent)."""
    if progress is None:
        return None
    return lambda event: progress(replace(event, step=n))


def train_steps_with(
    run_dir: Path | None,
    body: dict[str, Any],
    tokens: np.ndarray,
    cfg: TrainConfig,
    plan: TrainPlan,
    stepper: TrainStepper,
    on_step: Callable[[StepDone], None] | None,
    progress: ProgressHook | None = None,
) -> None:
    """Run the steps after those in `body` with `stepper`, recording each; at each checkpointed state,
    note the checkpoint and save progress. `run_dir` None means "do not write" (ranks other than 0)."""
    data_key = DataSpec.from_dict(body["data"]).data_key
    start = len(body["steps"])
    for n in range(start, plan.steps):
        batch = batch_for_step(tokens, data_key, cfg, n)  # (M, B, T+1)
        published = checkpointed(n + 1, plan)
        stepped = stepper.step(n, batch, published, progress_for_step(progress, n))
        if run_dir is None or stepped.output is None:
            continue
        record = StepRecord(n, digest_batch(batch), float(stepped.loss), stepped.output, stepped.trace)
        body["steps"].append(record.to_dict())
        body["loss_curve"].append(record.loss)
        if published:
            body["checkpoints"].append(n + 1)
            write_atomic(run_dir / PROGRESS_FILE, canonical_json(body))
        if on_step is not None:
            on_step(StepDone(n, plan.steps, record.loss, start))


class InMemoryStepper:
    """A TrainStepper holding the whole state: `step_fn(state, batch[, trace])` per step; into `run_dir`
    (None: nothing is written) go the step's trace (with `traces`) and the checkpoints."""

    def __init__(
        self,
        run_dir: Path | None,
        state: dict[str, np.ndarray],
        step_fn: Callable[..., StepResult],
        traces: bool = False,
    ) -> None:
        self._run_dir, self._state, self._step_fn, self._traces = run_dir, state, step_fn, traces

    def step(self, n: int, batch: np.ndarray, checkpoint: bool, progress: ProgressHook | None) -> Stepped:
        recorder = TraceRecorder() if self._traces else None
        args = (self._state, batch) if recorder is None else (self._state, batch, recorder)
        result = self._step_fn(*args) if progress is None else self._step_fn(*args, progress=progress)
        self._state = result.state
        if self._run_dir is None:
            return Stepped(result.loss, None, None)
        output = digest_state(self._state)
        trace_digest = None
        if recorder is not None:
            blob = encode_trace(n, recorder.ops)
            write_atomic(self._run_dir / trace_path(n), blob)
            trace_digest = digest_bytes(blob)
        if checkpoint:
            save_checkpoint(self._run_dir, n + 1, self._state, output)
        return Stepped(result.loss, output, trace_digest)


def train_steps(
    run_dir: Path | None,
    body: dict[str, Any],
    tokens: np.ndarray,
    state: dict[str, np.ndarray],
    cfg: TrainConfig,
    plan: TrainPlan,
    step_fn: Callable[..., StepResult],
    on_step: Callable[[StepDone], None] | None,
    *,
    progress: ProgressHook | None = None,
) -> None:
    """Run the steps after those in `body` from `state` in memory, recording each; checkpoint and save
    progress every K-th. `run_dir` None means "do not write" (ranks other than 0 of a distributed run).
    `progress` gets the step core's events (engine.progress) with `step` set; step_fn is then called
    with progress=."""
    stepper = InMemoryStepper(run_dir, state, step_fn, plan.traces)
    train_steps_with(run_dir, body, tokens, cfg, plan, stepper, on_step, progress)
