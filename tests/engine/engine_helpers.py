"""Helpers shared by the engine tests: a real text corpus and small configs."""

from __future__ import annotations

import dataclasses
import inspect
import time

import numpy as np
import torch.distributed as dist

from p2paudit.engine.config import TrainConfig, train_config


def text_corpus() -> np.ndarray:
    """Real English-and-Python text: the source of the stdlib's `inspect` module, as bytes."""
    with open(inspect.__file__, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8)


def shrunk_config(micro_batches: int = 2, seq_len: int = 16, tied: bool = True, seed: int = 7) -> TrainConfig:
    """The tiny config with a shorter context and batch, so multi-backend tests stay quick."""
    cfg = train_config("tiny", micro_batches=micro_batches, seed=seed, steps=20)
    model = dataclasses.replace(cfg.model, name="tiny-test", seq_len=seq_len, tied_head=tied)
    return dataclasses.replace(cfg, model=model, batch_size=2)


def distributed_run(rank: int, world_size: int, cfg: TrainConfig, tokens: np.ndarray, steps: int) -> dict:
    """Worker body for spawn_workers: `steps` distributed steps from init; returns the final state."""
    import kernels
    from p2paudit.engine.distributed import distributed_train_step
    from p2paudit.engine.schedule import batch_for_step
    from p2paudit.engine.state import init_state

    backend = kernels.get_backend("reference")
    state = init_state(cfg)
    losses = []
    for n in range(steps):
        result = distributed_train_step(
            state, batch_for_step(tokens, b"dist-test", cfg, n), cfg, backend, rank, world_size
        )
        state = result.state
        losses.append(result.loss)
    return {"state": state, "losses": losses}


def failing_run(rank: int, world_size: int) -> int:
    """Worker body whose last rank fails: spawn_workers must raise, not hang."""
    if rank == world_size - 1:
        raise ValueError(f"rank {rank} fails on purpose")
    return rank


def failing_before_a_collective_run(rank: int, world_size: int) -> int:
    """The last rank fails at once; the others then wait for it in a barrier, which fails in turn (its
    connection closed): torch may report that consequence first, spawn_workers must name the cause."""
    if rank == world_size - 1:
        raise ValueError(f"rank {rank} fails on purpose")
    time.sleep(0.5)
    dist.barrier()
    return rank


def assert_grads_close(ours: dict, want: dict, rel_tol: float) -> None:
    """Every float32 gradient within rel_tol * max |want| + 1e-7 of the float64 one, with its shape."""
    for name, g in want.items():
        assert ours[name].dtype == np.float32 and ours[name].shape == g.shape
        err = np.abs(ours[name].astype(np.float64) - g).max()
        assert err <= rel_tol * np.abs(g).max() + 1e-7, f"{name}: max error {err:.3g}, scale {np.abs(g).max():.3g}"
