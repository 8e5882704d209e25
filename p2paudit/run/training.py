"""The publisher's step loop: run the steps after those recorded, record each, checkpoint every K-th.

Shared by the one-process publisher (`run.publisher`) and its ranks on W
processes (`run.workers`), so both write the same files in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from p2paudit.engine.config import TrainConfig
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.step import StepResult
from p2paudit.run.checkpoint import save_checkpoint
from p2paudit.run.digest import digest_batch, digest_bytes, digest_state
from p2paudit.run.manifest import StepRecord, canonical_json
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


@dataclass(frozen=True)
class StepDone:
    """Progress report for one finished step (handed to the caller's callback)."""

    step: int
    steps: int
    loss: float
    resumed_from: int  # the state index this session started from


def train_steps(
    run_dir: Path | None,
    body: dict,
    tokens: np.ndarray,
    state: dict,
    cfg: TrainConfig,
    plan: TrainPlan,
    step_fn: Callable[..., StepResult],
    on_step: Callable[[StepDone], None] | None,
) -> None:
    """Run the steps after those in `body`, recording each; checkpoint and save progress every K-th.

    `run_dir` None means "do not write" (ranks other than 0 of a distributed run).
    """
    data_key = DataSpec.from_dict(body["data"]).data_key
    start = len(body["steps"])
    for n in range(start, plan.steps):
        batch = batch_for_step(tokens, data_key, cfg, n)  # (M, B, T+1)
        recorder = TraceRecorder() if plan.traces else None
        result = step_fn(state, batch, recorder) if recorder is not None else step_fn(state, batch)
        state = result.state
        if run_dir is None:
            continue
        output = digest_state(state)
        trace_digest = None
        if recorder is not None:
            blob = encode_trace(n, recorder.ops)
            write_atomic(run_dir / trace_path(n), blob)
            trace_digest = digest_bytes(blob)
        record = StepRecord(n, digest_batch(batch), float(result.loss), output, trace_digest)
        body["steps"].append(record.to_dict())
        body["loss_curve"].append(record.loss)
        if (n + 1) % plan.ckpt_every == 0 or n + 1 == plan.steps:
            save_checkpoint(run_dir, n + 1, state, output)
            body["checkpoints"].append(n + 1)
            write_atomic(run_dir / PROGRESS_FILE, canonical_json(body))
        if on_step is not None:
            on_step(StepDone(n, plan.steps, record.loss, start))
