"""A step's micro-batches spread over W processes, with the same bits as one process.

Rank r of W computes micro-batches [r*M/W, (r+1)*M/W) (W, M powers of two,
W <= M), so its share is an aligned subtree of the pairwise tree of
step.tree_reduce; it sums that share, the ranks exchange their partial sums
with all_gather (a byte copy), and every rank adds the W partials in the same
tree order and applies the same update. torch.distributed's own reductions
(all_reduce, reduce) are never used for hashed values: their order is the
library's, not ours.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels.backend_contract import Backend
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.progress import ProgressHook
from p2paudit.engine.state import check_state
from p2paudit.engine.step import (
    StepResult,
    apply_update,
    check_batch,
    sum_micro_batches,
    tree_sum,
    tree_sum_losses,
)
from p2paudit.errors import InputError


def free_loopback_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


GROUP_TIMEOUT = timedelta(minutes=5)


def init_loopback_group(rank: int, world_size: int, port: int, dist_backend: str | None = None) -> None:
    """Join the process group on tcp://127.0.0.1:port (gloo by default; "nccl" for CUDA tensors).

    A rank that waits longer than GROUP_TIMEOUT for its peers fails rather than hangs.
    """

    # Gloo picks its interface from the hostname unless told; keep all traffic on loopback.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(
        backend=dist_backend or "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=GROUP_TIMEOUT,
    )


def collective_backend(rank: int, world_size: int) -> tuple[str, str]:
    """("nccl", "cuda:<rank>") when CUDA offers a GPU per rank, else ("gloo", "cpu").

    Either way the collective only copies bytes (all_gather); the sums are done
    by the engine's tree on the host, so the choice cannot change a bit.
    """
    if torch.cuda.is_available() and torch.cuda.device_count() >= world_size:
        return "nccl", f"cuda:{rank}"
    return "gloo", "cpu"


def group_device() -> str:
    """The device the initialised group's collectives run on: the rank's GPU under NCCL, else the CPU."""
    if dist.get_backend() == "nccl":
        return f"cuda:{torch.cuda.current_device()}"
    return "cpu"


def rank_share(cfg: TrainConfig, rank: int, world_size: int) -> range:
    """The micro-batch indices rank `rank` computes: a contiguous, aligned block of M/W."""
    M = cfg.micro_batches
    if world_size < 1 or world_size & (world_size - 1) or world_size > M:
        raise InputError(f"world size {world_size} must be a power of two <= micro_batches {M}")
    if not 0 <= rank < world_size:
        raise InputError(f"rank {rank} is outside [0, {world_size})")
    per = M // world_size
    return range(rank * per, (rank + 1) * per)


def _flatten(grads: dict[str, np.ndarray], loss: np.float32) -> np.ndarray:
    """One float32 buffer: every gradient in order, then the loss (concatenation is a copy)."""
    return np.concatenate([g.reshape(-1) for g in grads.values()] + [np.array([loss], dtype=np.float32)])


def _unflatten(buf: np.ndarray, like: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.float32]:
    out, at = {}, 0
    for name, g in like.items():
        out[name] = buf[at : at + g.size].reshape(g.shape).copy()
        at += g.size
    return out, np.float32(buf[at])


def all_gather_buffers(buf: np.ndarray, world_size: int, device: str = "cpu") -> list[np.ndarray]:
    """Every rank's float32 buffer, in rank order (all ranks pass buffers of one length)."""
    mine = torch.from_numpy(buf).to(device)
    parts = [torch.empty_like(mine) for _ in range(world_size)]
    dist.all_gather(parts, mine)
    return [p.cpu().numpy() for p in parts]


def distributed_train_step(
    state: dict[str, np.ndarray],
    batch: np.ndarray,
    cfg: TrainConfig,
    backend: Backend[Any],
    rank: int,
    world_size: int,
    device: str | None = None,
    *,
    progress: ProgressHook | None = None,
) -> StepResult:
    """train_step with micro-batches spread over the process group; the same bits on every rank.

    Preconditions: the group is initialised (init_loopback_group) with `world_size`
    ranks, and every rank passes the same state, batch and config.
    """
    check_state(state, cfg)
    check_batch(batch, cfg)
    share = rank_share(cfg, rank, world_size)
    partial, partial_loss = sum_micro_batches(state, batch, share, cfg, backend, progress=progress)
    if world_size == 1:
        total, loss_sum = partial, partial_loss
    else:
        where = device if device is not None else group_device()
        gathered = all_gather_buffers(_flatten(partial, partial_loss), world_size, where)
        pieces = [_unflatten(b, partial) for b in gathered]
        total = tree_sum([g for g, _ in pieces])
        loss_sum = tree_sum_losses([loss for _, loss in pieces])
    loss = np.float32(loss_sum / np.float32(cfg.micro_batches))
    return StepResult(state=apply_update(state, total, cfg, backend, progress=progress), loss=loss)


@dataclass(frozen=True)
class WorkerFailure:
    """What a worker's fn raised, sent back before the process dies: the root cause, which the spawn names
    even when a peer's own error (its group connection closed by the dying worker) is what torch reports."""

    rank: int
    message: str


def _worker(rank: int, world_size: int, port: int, queue: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """Entry point of one spawned process: join the group, run fn, report its result (or failure), leave."""
    torch.set_num_threads(1)
    dist_backend, device = collective_backend(rank, world_size)
    if device != "cpu":
        torch.cuda.set_device(device)
    init_loopback_group(rank, world_size, port, dist_backend)
    # Every rank has joined before any runs fn: a rank whose fn returns at once would otherwise leave (and
    # close its connections) while a peer was still starting the group, failing that peer's start before its
    # fn ran (seen in CI: rank 1's "Gloo connectFullMesh failed ... closed by peer" instead of its fn's error).
    dist.barrier()
    try:
        queue.put((rank, fn(rank, world_size, *args)))
    except BaseException as exc:
        queue.put((rank, WorkerFailure(rank, f"{type(exc).__name__}: {exc}")))
        raise
    finally:
        dist.destroy_process_group()


def _failure(results: dict[int, Any]) -> RuntimeError | None:
    """One error naming what every failed worker's fn raised, in rank order; None when none did."""
    failures = [v for _, v in sorted(results.items()) if isinstance(v, WorkerFailure)]
    if not failures:
        return None
    return RuntimeError("a worker failed: " + "; ".join(f"rank {f.rank} raised {f.message}" for f in failures))


def spawn_workers(world_size: int, fn: Callable[..., Any], *args: Any) -> list[Any]:
    """Run fn(rank, world_size, *args) in `world_size` fresh processes joined in a loopback group.

    fn must be a module-level (picklable) function; its return values come back
    in rank order. The processes end when fn returns. When fn raises in a
    worker, a RuntimeError here names each failed rank and what it raised
    (WorkerFailure), even when torch first found a peer's consequent error (its
    group connection closed by the dying worker); a worker that dies otherwise
    (in the group's start, killed) raises torch's own error.
    """

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = free_loopback_port()
    procs = mp.start_processes(  # type: ignore[attr-defined,no-untyped-call]  # torch leaves it untyped
        _worker, args=(world_size, port, queue, fn, args), nprocs=world_size, join=False, start_method="spawn"
    )
    results: dict[int, Any] = {}

    def drain() -> None:
        while not queue.empty():
            rank, value = queue.get()
            results[rank] = value

    try:
        # Drain results while waiting, so a large result cannot block a child on a full pipe.
        while len(results) < world_size:
            drain()
            if len(results) < world_size and procs.join(timeout=0.2):
                drain()
                break
        while not procs.join():
            pass
    except Exception as exc:  # a worker died: torch names the first it finds, perhaps a peer's consequence
        drain()
        failed = _failure(results)
        if failed is not None:
            raise failed from exc
        raise
    failed = _failure(results)
    if failed is not None:  # fn raised, yet its process exited cleanly (a handler swallowed the exit)
        raise failed
    if len(results) != world_size:
        raise RuntimeError(f"{world_size - len(results)} of {world_size} workers gave no result")
    return [results[r] for r in range(world_size)]
