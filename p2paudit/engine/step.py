"""One training step as a pure function: (state_n, batch_n) -> state_{n+1}.

    for m in 0..M-1: grads_m, loss_m = micro_batch_grads(state, batch[m])
    G    = tree_sum(grads_0 .. grads_{M-1})        # fixed pairwise tree over m
    loss = tree_sum(loss_0 .. loss_{M-1}) / M
    state' = apply_update(state, G)                 # AdamW on G / M with lr_at(step)

The order of those operations is written once, in engine.step_core.run_step;
`train_step` is its in-memory configuration (the whole state on the backend,
partial sums kept as they are, the new state collected whole), as
engine.streaming.streamed_step is its bounded-memory one.

Nothing here reads a clock, a global generator or a thread count, and no
argument is mutated: every new tensor is a new array.

The public functions take and return numpy arrays. Inside, the work runs on
the backend's own arrays: the state (less its step counter, a host integer)
and the batch go up once with `backend.to_device`, every op between kernels
is the backend's, and the new state, gradients and loss come back once with
`backend.to_host` (on the numpy backends both move nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from kernels.backend_contract import Backend
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.model import Trace, check_tokens, host_trace
from p2paudit.engine.progress import ProgressHook
from p2paudit.engine.state import check_state, param_shapes, state_names
from p2paudit.engine.step_core import (
    GradSums,
    MemoryGradStore,
    PairwiseTree,
    fold_micro_batches,
    micro_batch_grads_on,
    run_step,
    update_params,
)
from p2paudit.errors import InputError

T_ = TypeVar("T_")

__all__ = [
    "PairwiseTree",
    "StepResult",
    "add_grads",
    "apply_update",
    "check_batch",
    "micro_batch_grads",
    "params_to_device",
    "state_to_device",
    "state_to_host",
    "sum_micro_batches",
    "train_step",
    "tree_reduce",
    "tree_sum",
    "tree_sum_losses",
]


@dataclass(frozen=True)
class StepResult:
    """The state after the step and the step's loss (mean of the micro-batch losses)."""

    state: dict[str, np.ndarray]
    loss: np.float32


def micro_batch_grads(
    state: dict[str, np.ndarray],
    tokens: np.ndarray,
    cfg: TrainConfig,
    backend: Backend[Any],
    trace: Trace | None = None,
) -> tuple[dict[str, np.ndarray], np.float32]:
    """Gradients of one micro-batch's mean loss, keyed by param name, and that loss.

    Bad input (a state that fails check_state, tokens not int64 (B, seq_len + 1)
    with ids below vocab_size) raises InputError.
    """
    check_state(state, cfg)
    check_tokens(tokens, cfg.model)
    grads, loss = micro_batch_grads_on(
        params_to_device(state, backend), backend.to_device(tokens), cfg, backend, host_trace(trace, backend)
    )
    return {name: backend.to_host(g) for name, g in grads.items()}, np.float32(backend.to_host(loss))


def state_to_device(state: dict[str, np.ndarray], backend: Backend[Any]) -> dict[str, np.ndarray]:
    """The state's float tensors as the backend's arrays (one copy each); "step" stays a host array."""
    return {name: t if name == "step" else backend.to_device(t) for name, t in state.items()}


def params_to_device(state: dict[str, np.ndarray], backend: Backend[Any]) -> dict[str, np.ndarray]:
    """Only the parameters ("params/...") as the backend's arrays: all the gradients need."""
    return {name: backend.to_device(t) for name, t in state.items() if name.startswith("params/")}


def state_to_host(state: dict[str, np.ndarray], backend: Backend[Any]) -> dict[str, np.ndarray]:
    """The inverse of state_to_device: numpy arrays (one copy each of the float tensors)."""
    return {name: t if name == "step" else backend.to_host(t) for name, t in state.items()}


def tree_reduce(items: list[T_], add: Callable[[T_, T_], T_]) -> T_:
    """The pairwise tree sum (see step_core.PairwiseTree) of a power-of-two number of items."""
    tree: PairwiseTree[T_] = PairwiseTree(add)
    for item in items:
        tree.push(item)
    return tree.total()


def add_grads(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Elementwise float32 a + b for every tensor, keeping a's order."""
    return {name: a[name] + b[name] for name in a}


def tree_sum(grads: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The pairwise tree sum (see tree_reduce) of a power-of-two number of gradient dicts."""
    return tree_reduce(grads, add_grads)


def tree_sum_losses(losses: list[np.float32]) -> np.float32:
    """The same pairwise tree over float32 scalars."""
    return tree_reduce([np.float32(x) for x in losses], lambda a, b: np.float32(a + b))


class StateCollector:
    """A step_core.Sink that gathers the new state's tensors and gives them back in state order."""

    def __init__(self, cfg: TrainConfig) -> None:
        self._names = state_names(cfg)
        self._made: dict[str, np.ndarray] = {}

    def __call__(self, name: str, array: np.ndarray) -> None:
        self._made[name] = array

    def state(self) -> dict[str, np.ndarray]:
        return {name: self._made[name] for name in self._names}


def apply_update(
    state: dict[str, np.ndarray],
    grads: dict[str, np.ndarray],
    cfg: TrainConfig,
    backend: Backend[Any],
    trace: Trace | None = None,
    *,
    progress: ProgressHook | None = None,
) -> dict[str, np.ndarray]:
    """The state after one AdamW update from the tree-summed gradients `grads` (divided by M here).

    Weight decay applies to matrices (2-d parameters) only, not to norm gains.
    """
    for name, shape in param_shapes(cfg.model).items():
        if name not in grads or grads[name].shape != shape or grads[name].dtype != np.float32:
            raise InputError(f"gradient {name} is missing or not float32 {shape}")
    needed = [p + name for p in ("params/", "opt/m/", "opt/v/") for name in param_shapes(cfg.model)]
    dstate = {key: backend.to_device(state[key]) for key in needed}
    dgrads = {name: backend.to_device(grads[name]) for name in param_shapes(cfg.model)}
    new = StateCollector(cfg)
    update_params(
        dstate, dgrads, int(state["step"]), in_state(dstate), new, cfg, backend, host_trace(trace, backend), progress
    )
    return state_to_host(new.state(), backend)


def in_state(state: dict[str, np.ndarray]) -> Callable[[str], tuple[np.ndarray, np.ndarray]]:
    """step_core.Moments read from a whole state."""
    return lambda name: (state["opt/m/" + name], state["opt/v/" + name])


def check_batch(batch: np.ndarray, cfg: TrainConfig) -> None:
    """InputError unless batch is int64 (M, B, seq_len + 1) for this config."""
    want = (cfg.micro_batches, cfg.batch_size, cfg.model.seq_len + 1)
    if not isinstance(batch, np.ndarray) or batch.dtype != np.int64:
        raise InputError(f"batch must be an int64 array of shape {want}")
    if batch.shape != want:
        raise InputError(f"batch has shape {batch.shape}, want {want}")


def sum_micro_batches(
    state: dict[str, np.ndarray],
    batch: np.ndarray,
    indices: range,
    cfg: TrainConfig,
    backend: Backend[Any],
    trace: Trace | None = None,
    *,
    progress: ProgressHook | None = None,
) -> tuple[dict[str, np.ndarray], np.float32]:
    """Tree sums of the gradients and losses of micro-batches `indices` (a power-of-two count).

    Each micro-batch's gradients are folded into the tree as soon as they exist,
    so memory holds O(log M) gradient sets, not M. Bad input raises InputError
    (see micro_batch_grads).
    """
    check_state(state, cfg)
    for m in indices:
        check_tokens(batch[m], cfg.model)
    share = batch[indices.start : indices.stop : indices.step]  # only these micro-batches go up
    grads, loss = fold_micro_batches(
        params_to_device(state, backend),
        backend.to_device(share),
        indices,
        cfg,
        backend,
        GradSums(MemoryGradStore(), backend, on_host=False),
        host_trace(trace, backend),
        progress,
    )
    return {name: backend.to_host(g) for name, g in grads.items()}, np.float32(backend.to_host(loss))


def train_step(
    state: dict[str, np.ndarray],
    batch: np.ndarray,
    cfg: TrainConfig,
    backend: Backend[Any],
    trace: Trace | None = None,
    *,
    progress: ProgressHook | None = None,
) -> StepResult:
    """One full step on batch (M, B, T+1); trace op names start with "mb<m>/", "grad/", "loss", "update/".

    `progress` (engine.progress) is told of each layer, micro-batch and parameter update as it finishes.
    """
    check_state(state, cfg)
    check_batch(batch, cfg)
    for m in range(cfg.micro_batches):
        check_tokens(batch[m], cfg.model)  # token ids are checked here, on the host, before the upload
    dstate = state_to_device(state, backend)
    new = StateCollector(cfg)
    loss = run_step(
        dstate,
        backend.to_device(batch),
        int(state["step"]),
        cfg,
        backend,
        sums=GradSums(MemoryGradStore(), backend, on_host=False),
        moments=in_state(dstate),
        sink=new,
        trace=host_trace(trace, backend),
        progress=progress,
    )
    return StepResult(state=state_to_host(new.state(), backend), loss=np.float32(backend.to_host(loss)))
