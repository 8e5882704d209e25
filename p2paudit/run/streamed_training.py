"""The publisher's step loop with bounded memory: each step streams from one checkpoint file to the next.

The same records, checkpoints and progress file as run.training.train_steps,
byte for byte (tests/run/test_streamed_training.py), holding only what a
streamed step holds (engine.streaming): state n is read from its checkpoint
(the published one, or a scratch file when state n is not checkpointed) and
state n + 1 is written tensor by tensor, into checkpoints/ when it is to be
published and into the scratch directory otherwise. No trace is recorded
(a trace needs the whole step in memory) and the run is on one process.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from p2paudit.engine.backends import load_backend
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import state_names, state_shapes
from p2paudit.engine.streaming import GradStore, MemoryGradStore
from p2paudit.errors import InternalError
from p2paudit.run.checkpoint import CheckpointWriter, checkpoint_path, open_checkpoint
from p2paudit.run.digest import StateDigest, digest_batch
from p2paudit.run.manifest import StepRecord, canonical_json
from p2paudit.run.shards import DataSpec
from p2paudit.run.spill import DiskGradStore, scratch_directory
from p2paudit.run.storage import write_atomic
from p2paudit.run.streamed_step import stream_step
from p2paudit.run.training import PROGRESS_FILE, StepDone, TrainPlan


def train_steps_streamed(
    run_dir: Path,
    body: dict,
    tokens: np.ndarray,
    start_digest: StateDigest,
    cfg: TrainConfig,
    plan: TrainPlan,
    scratch_dir: Path,
    spill: bool,
    on_step: Callable[[StepDone], None] | None,
) -> None:
    """Run the steps after those in `body` from the checkpoint of state len(body["steps"]) in `run_dir`
    (whose digest is `start_digest`), recording each; checkpoint and save progress every K-th."""
    if plan.traces or plan.world_size != 1:
        raise InternalError("a streamed run has no traces and runs on one process")
    be = load_backend(plan.backend)
    data_key = DataSpec.from_dict(body["data"]).data_key
    names, shapes = state_names(cfg), state_shapes(cfg)
    start = len(body["steps"])
    with scratch_directory(scratch_dir, "train-") as tmp:
        source_dir, digest = run_dir, start_digest
        for n in range(start, plan.steps):
            batch = batch_for_step(tokens, data_key, cfg, n)  # (M, B, T+1)
            published = (n + 1) % plan.ckpt_every == 0 or n + 1 == plan.steps
            target_dir = run_dir if published else tmp
            store: GradStore = DiskGradStore(tmp) if spill else MemoryGradStore()
            try:
                with (
                    open_checkpoint(source_dir, n, digest, names, shapes, check_reads=True) as reader,
                    CheckpointWriter(target_dir / checkpoint_path(n + 1), n + 1, shapes) as writer,
                ):
                    done = stream_step(reader, batch, cfg, be, store, writer)
            finally:
                if isinstance(store, DiskGradStore):
                    store.close()
            if source_dir != run_dir:
                (source_dir / checkpoint_path(n)).unlink(missing_ok=True)
            record = StepRecord(n, digest_batch(batch), float(done.loss), done.output, None)
            body["steps"].append(record.to_dict())
            body["loss_curve"].append(record.loss)
            if published:
                body["checkpoints"].append(n + 1)
                write_atomic(run_dir / PROGRESS_FILE, canonical_json(body))
            if on_step is not None:
                on_step(StepDone(n, plan.steps, record.loss, start))
            source_dir, digest = target_dir, done.output
