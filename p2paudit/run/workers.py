"""The publisher on W processes: every rank steps, rank 0 alone writes files and reports progress.

Each rank runs the engine's distributed step on its share of the
micro-batches; the engine guarantees the same bits as one process, so all
ranks hold the same state after every step and rank 0's digests are the run's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from multiprocessing.queues import SimpleQueue
from pathlib import Path
from typing import Any

import numpy as np
import torch.multiprocessing as mp

from p2paudit.engine.backends import load_backend
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.distributed import distributed_train_step, spawn_workers
from p2paudit.engine.progress import ProgressHook, StepProgress
from p2paudit.engine.step import StepResult
from p2paudit.errors import InternalError
from p2paudit.run.training import StepDone, TrainPlan, train_steps

Reports = SimpleQueue[StepDone | StepProgress]  # rank 0's finished steps and progress events, as they come


def _rank_main(
    rank: int,
    world_size: int,
    run_dir: Path,
    body: dict[str, Any],
    tokens: np.ndarray,
    state: dict[str, np.ndarray],
    cfg_dict: dict[str, Any],
    plan: TrainPlan,
    progress: Reports,
    watched: bool = False,
) -> dict[str, Any] | None:
    """One rank's loop; returns the finished body on rank 0, None elsewhere. Rank 0 puts each finished
    step (StepDone) and, when `watched`, the step core's events (StepProgress) on the `progress` queue."""
    cfg = TrainConfig.from_dict(cfg_dict)
    backend = load_backend(plan.backend, plan.arithmetic)

    def step_fn(s: dict[str, np.ndarray], batch: np.ndarray, *, progress: ProgressHook | None = None) -> StepResult:
        return distributed_train_step(s, batch, cfg, backend, rank, world_size, progress=progress)

    report = progress.put if rank == 0 else None
    events = progress.put if rank == 0 and watched else None
    train_steps(run_dir if rank == 0 else None, body, tokens, state, cfg, plan, step_fn, report, progress=events)
    return body if rank == 0 else None


def train_distributed(
    run_dir: Path,
    body: dict[str, Any],
    tokens: np.ndarray,
    state: dict[str, np.ndarray],
    cfg: TrainConfig,
    plan: TrainPlan,
    on_step: Callable[[StepDone], None] | None,
    *,
    progress: ProgressHook | None = None,
) -> None:
    """Run the remaining steps of `body` on plan.world_size processes; `body` is updated in place.

    Progress from rank 0 comes back over a queue and is handed to `on_step` (each
    finished step) and `progress` (the step core's events, its share of each step's
    micro-batches, then the update) in this process (the spawned ranks cannot call them).
    """
    queue: Reports = mp.get_context("spawn").SimpleQueue()
    results: list[object] = []  # what each rank returned, in rank order (pickled across: checked below)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            results.extend(
                spawn_workers(
                    plan.world_size,
                    _rank_main,
                    run_dir,
                    body,
                    tokens,
                    state,
                    cfg.to_dict(),
                    plan,
                    queue,
                    progress is not None,
                )
            )
        except BaseException as exc:  # re-raised in the calling thread below
            failed.append(exc)

    thread = threading.Thread(target=run, name="p2paudit-ranks", daemon=True)
    thread.start()
    while thread.is_alive() or not queue.empty():
        _drain(queue, on_step, progress)
        thread.join(timeout=0.1)
    _drain(queue, on_step, progress)
    if failed:
        raise failed[0]
    finished = results[0]
    if not isinstance(finished, dict):
        raise InternalError(f"rank 0 returned {type(finished).__name__}, not the run's body")
    body.clear()
    body.update(finished)


def _drain(queue: Reports, on_step: Callable[[StepDone], None] | None, progress: ProgressHook | None) -> None:
    while not queue.empty():
        report = queue.get()
        if isinstance(report, StepProgress):
            if progress is not None:
                progress(report)
        elif on_step is not None:
            on_step(report)
