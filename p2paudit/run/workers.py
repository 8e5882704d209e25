"""The publisher on W processes: every rank steps, rank 0 alone writes files and reports progress.

Each rank runs the engine's distributed step on its share of the
micro-batches; the engine guarantees the same bits as one process, so all
ranks hold the same state after every step and rank 0's digests are the run's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch.multiprocessing as mp

from p2paudit.engine.backends import load_backend
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.distributed import distributed_train_step, spawn_workers
from p2paudit.run.training import StepDone, TrainPlan, train_steps


def _rank_main(
    rank: int,
    world_size: int,
    run_dir: Path,
    body: dict,
    tokens: np.ndarray,
    state: dict,
    cfg_dict: dict,
    plan: TrainPlan,
    progress: Any,
) -> dict | None:
    """One rank's loop; returns the finished body on rank 0, None elsewhere."""
    cfg = TrainConfig.from_dict(cfg_dict)
    backend = load_backend(plan.backend)

    def step_fn(s: dict, batch: np.ndarray):
        return distributed_train_step(s, batch, cfg, backend, rank, world_size)

    report = progress.put if rank == 0 else None
    train_steps(run_dir if rank == 0 else None, body, tokens, state, cfg, plan, step_fn, report)
    return body if rank == 0 else None


def train_distributed(
    run_dir: Path,
    body: dict,
    tokens: np.ndarray,
    state: dict,
    cfg: TrainConfig,
    plan: TrainPlan,
    on_step: Callable[[StepDone], None] | None,
) -> None:
    """Run the remaining steps of `body` on plan.world_size processes; `body` is updated in place.

    Progress from rank 0 comes back over a queue and is handed to `on_step`
    in this process (the spawned ranks cannot call it).
    """
    progress = mp.get_context("spawn").SimpleQueue()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["results"] = spawn_workers(
                plan.world_size, _rank_main, run_dir, body, tokens, state, cfg.to_dict(), plan, progress
            )
        except BaseException as exc:  # re-raised in the calling thread below
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="p2paudit-ranks", daemon=True)
    thread.start()
    while thread.is_alive() or not progress.empty():
        _drain(progress, on_step)
        thread.join(timeout=0.1)
    _drain(progress, on_step)
    if "error" in outcome:
        raise outcome["error"]
    finished = outcome["results"][0]
    body.clear()
    body.update(finished)


def _drain(progress: Any, on_step: Callable[[StepDone], None] | None) -> None:
    while not progress.empty():
        done = progress.get()
        if on_step is not None:
            on_step(done)
