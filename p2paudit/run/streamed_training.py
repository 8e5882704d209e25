"""The publisher's step loop with bounded memory: each step streams from one checkpoint file to the next.

The loop and its checkpoint policy are run.training's (train_steps_with), so
the records, checkpoints and progress file are those of run.training.train_steps,
byte for byte (tests/run/test_streamed_training.py); the StreamedStepper here
holds only what a streamed step holds (engine.streaming): state n is read from
its checkpoint (the published one, or a scratch file when state n is not
checkpointed) and state n + 1 is written tensor by tensor, into checkpoints/
when it is to be published and into the scratch directory otherwise. No trace
is recorded (a trace needs the whole step in memory) and the run is on one process.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from p2paudit.engine.backends import load_backend
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.progress import ProgressHook
from p2paudit.engine.state import state_names, state_shapes
from p2paudit.errors import InternalError
from p2paudit.run.checkpoint import CheckpointWriter, checkpoint_path, open_checkpoint
from p2paudit.run.digest import StateDigest
from p2paudit.run.spill import scratch_directory
from p2paudit.run.streamed_step import grad_store, stream_step
from p2paudit.run.training import StepDone, Stepped, TrainPlan, train_steps_with


class StreamedStepper:
    """A TrainStepper from the checkpoint of the state in `run_dir` whose digest is `start_digest`; states
    that are not published wait in a scratch directory under `scratch_dir` (made on entry, removed on exit)."""

    def __init__(
        self,
        run_dir: Path,
        start_digest: StateDigest,
        cfg: TrainConfig,
        plan: TrainPlan,
        scratch_dir: Path,
        spill: bool,
    ) -> None:
        self._run_dir, self._cfg, self._spill = run_dir, cfg, spill
        self._be = load_backend(plan.backend, plan.arithmetic)
        self._scratch_dir = scratch_dir
        self._files = ExitStack()
        self._tmp = Path()
        self._source_dir, self._digest = run_dir, start_digest  # where state n is, and its digest

    def __enter__(self) -> StreamedStepper:
        self._tmp = self._files.enter_context(scratch_directory(self._scratch_dir, "train-"))
        return self

    def __exit__(self, *exc: object) -> None:
        self._files.close()

    def step(self, n: int, batch: np.ndarray, checkpoint: bool, progress: ProgressHook | None) -> Stepped:
        cfg = self._cfg
        target_dir = self._run_dir if checkpoint else self._tmp
        names, shapes = state_names(cfg), state_shapes(cfg)
        with (
            open_checkpoint(self._source_dir, n, self._digest, names, shapes, check_reads=True) as reader,
            CheckpointWriter(target_dir / checkpoint_path(n + 1), n + 1, shapes) as writer,
            grad_store(self._tmp, self._spill) as store,
        ):
            stepped = stream_step(reader, batch, cfg, self._be, store, writer, progress=progress)
        if self._source_dir != self._run_dir:
            (self._source_dir / checkpoint_path(n)).unlink(missing_ok=True)
        self._source_dir, self._digest = target_dir, stepped.output
        return Stepped(stepped.loss, stepped.output, None)


def train_steps_streamed(
    run_dir: Path,
    body: dict[str, Any],
    tokens: np.ndarray,
    start_digest: StateDigest,
    cfg: TrainConfig,
    plan: TrainPlan,
    scratch_dir: Path,
    spill: bool,
    on_step: Callable[[StepDone], None] | None,
    *,
    progress: ProgressHook | None = None,
) -> None:
    """Run the steps after those in `body` from the checkpoint of state len(body["steps"]) in `run_dir`
    (whose digest is `start_digest`), recording each; checkpoint and save progress every K-th.
    `progress`: as for run.training.train_steps."""
    if plan.traces or plan.world_size != 1:
        raise InternalError("a streamed run has no traces and runs on one process")
    with StreamedStepper(run_dir, start_digest, cfg, plan, scratch_dir, spill) as stepper:
        train_steps_with(run_dir, body, tokens, cfg, plan, stepper, on_step, progress)
