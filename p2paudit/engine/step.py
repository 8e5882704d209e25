"""One training step as a pure function: (state_n, batch_n) -> state_{n+1}.

    for m in 0..M-1: grads_m, loss_m = micro_batch_grads(state, batch[m])
    G    = tree_sum(grads_0 .. grads_{M-1})        # fixed pairwise tree over m
    loss = tree_sum(loss_0 .. loss_{M-1}) / M
    state' = apply_update(state, G)                 # AdamW on G / M with lr_at(step)

Nothing here reads a clock, a global generator or a thread count, and no
argument is mutated: every new tensor is a new array.

The public functions take and return numpy arrays. Inside, the work runs on
the backend's own arrays: the state (less its step counter, a host integer)
and the batch go up once with `backend.to_device`, every op between kernels
is the backend's, and the new state, gradients and loss come back once with
`backend.to_host` (on the numpy backends both move nothing). The `*_on`
functions are those insides.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Generic, TypeVar

import numpy as np

from p2paudit.engine.backward import backward
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.model import Trace, check_tokens, emit, forward_checked, host_trace, prefixed
from p2paudit.engine.schedule import lr_at
from p2paudit.engine.state import check_state, param_shapes
from p2paudit.errors import InputError

T_ = TypeVar("T_")


@dataclass(frozen=True)
class StepResult:
    """The state after the step and the step's loss (mean of the micro-batch losses)."""

    state: dict[str, np.ndarray]
    loss: np.float32


def micro_batch_grads(
    state: dict[str, np.ndarray], tokens: np.ndarray, cfg: TrainConfig, backend: ModuleType, trace: Trace | None = None
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


def state_to_device(state: dict[str, np.ndarray], backend: ModuleType) -> dict[str, np.ndarray]:
    """The state's float tensors as the backend's arrays (one copy each); "step" stays a host array."""
    return {name: t if name == "step" else backend.to_device(t) for name, t in state.items()}


def params_to_device(state: dict[str, np.ndarray], backend: ModuleType) -> dict[str, np.ndarray]:
    """Only the parameters ("params/...") as the backend's arrays: all the gradients need."""
    return {name: backend.to_device(t) for name, t in state.items() if name.startswith("params/")}


def state_to_host(state: dict[str, np.ndarray], backend: ModuleType) -> dict[str, np.ndarray]:
    """The inverse of state_to_device: numpy arrays (one copy each of the float tensors)."""
    return {name: t if name == "step" else backend.to_host(t) for name, t in state.items()}


def micro_batch_grads_on(
    state: dict[str, np.ndarray], tokens: np.ndarray, cfg: TrainConfig, backend: ModuleType, trace: Trace | None = None
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """micro_batch_grads on the backend's arrays: checked parameters (or state) and tokens already there; 0-d loss."""
    cache = forward_checked(state, tokens, cfg.model, backend, trace)
    grads = backward(cache, state, cfg.model, backend, trace)
    return grads, cache.loss


class PairwiseTree(Generic[T_]):
    """Sums items pushed one at a time by the fixed pairwise tree ((x0+x1)+(x2+x3))+... .

    Two partial sums are added as soon as both halves of a subtree exist, so at
    most log2(n) + 1 partial sums are held at once, and the adds (and their
    operand order: left + right) are exactly those of the level-by-level tree.
    Any aligned contiguous block of 2^j items is a subtree, which is what lets
    the distributed step sum each rank's share first and the shares after.
    """

    def __init__(self, add: Callable[[T_, T_], T_]) -> None:
        self._add = add
        self._stack: list[tuple[int, T_]] = []  # (number of items summed, partial sum), sizes decreasing
        self.count = 0

    def push(self, item: T_) -> None:
        size, value = 1, item
        while self._stack and self._stack[-1][0] == size:
            _, left = self._stack.pop()
            value = self._add(left, value)
            size *= 2
        self._stack.append((size, value))
        self.count += 1

    def total(self) -> T_:
        """The sum; precondition: a power-of-two number of items was pushed."""
        n = self.count
        if n < 1 or n & (n - 1):
            raise InputError(f"tree sum over {n} items, want a power of two")
        return self._stack[0][1]


def tree_reduce(items: list[T_], add: Callable[[T_, T_], T_]) -> T_:
    """The pairwise tree sum (see PairwiseTree) of a power-of-two number of items."""
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


def apply_update(
    state: dict[str, np.ndarray],
    grads: dict[str, np.ndarray],
    cfg: TrainConfig,
    backend: ModuleType,
    trace: Trace | None = None,
) -> dict[str, np.ndarray]:
    """The state after one AdamW update from the tree-summed gradients `grads` (divided by M here).

    Weight decay applies to matrices (2-d parameters) only, not to norm gains.
    """
    for name, shape in param_shapes(cfg.model).items():
        if name not in grads or grads[name].shape != shape or grads[name].dtype != np.float32:
            raise InputError(f"gradient {name} is missing or not float32 {shape}")
    needed = [p + name for p in ("params/", "opt/m/", "opt/v/") for name in param_shapes(cfg.model)]
    dstate = {key: backend.to_device(state[key]) for key in needed}
    dstate["step"] = state["step"]
    dgrads = {name: backend.to_device(grads[name]) for name in param_shapes(cfg.model)}
    new = apply_update_on(dstate, dgrads, cfg, backend, host_trace(trace, backend))
    return state_to_host(new, backend)


def apply_update_on(
    state: dict[str, np.ndarray],
    grads: dict[str, np.ndarray],
    cfg: TrainConfig,
    backend: ModuleType,
    trace: Trace | None = None,
) -> dict[str, np.ndarray]:
    """apply_update on the backend's arrays (gradients already checked); "step" is a host array."""
    o = cfg.optim
    done = int(state["step"])
    lr = lr_at(done, o)
    new_p, new_m, new_v = {}, {}, {}
    for name, shape in param_shapes(cfg.model).items():
        # exact unless subnormal: M is 2^j
        g = emit(trace, f"update/{name}/grad", backend.div_scalar(grads[name], np.float32(cfg.micro_batches)))
        wd = np.float32(o.weight_decay) if len(shape) == 2 else np.float32(0.0)
        p2, m2, v2 = backend.adamw(
            state["params/" + name], g, state["opt/m/" + name], state["opt/v/" + name],
            done + 1, lr, np.float32(o.beta1), np.float32(o.beta2), np.float32(o.eps), wd,
        )  # fmt: skip
        new_p[name] = emit(trace, f"update/{name}/p", p2)
        new_m[name] = emit(trace, f"update/{name}/m", m2)
        new_v[name] = emit(trace, f"update/{name}/v", v2)
    out = {"params/" + n: t for n, t in new_p.items()}
    out.update({"opt/m/" + n: t for n, t in new_m.items()})
    out.update({"opt/v/" + n: t for n, t in new_v.items()})
    out["step"] = np.array(done + 1, dtype=np.int64)
    return out


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
    backend: ModuleType,
    trace: Trace | None = None,
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
    grads, loss = sum_micro_batches_on(
        params_to_device(state, backend), backend.to_device(share), indices, cfg, backend, host_trace(trace, backend)
    )
    return {name: backend.to_host(g) for name, g in grads.items()}, np.float32(backend.to_host(loss))


def sum_micro_batches_on(
    state: dict[str, np.ndarray],
    batch: np.ndarray,
    indices: range,
    cfg: TrainConfig,
    backend: ModuleType,
    trace: Trace | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """sum_micro_batches on the backend's arrays (checked, then moved there); 0-d loss.

    batch holds exactly the micro-batches of `indices`, in order: batch[i] is micro-batch indices[i].
    """

    def add(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {name: backend.add(a[name], b[name]) for name in a}  # add_grads, on the backend

    grad_tree: PairwiseTree[dict[str, np.ndarray]] = PairwiseTree(add)
    loss_tree: PairwiseTree[np.ndarray] = PairwiseTree(backend.add)
    for i, m in enumerate(indices):
        g, loss = micro_batch_grads_on(state, batch[i], cfg, backend, prefixed(trace, f"mb{m}/"))
        grad_tree.push(g)
        loss_tree.push(loss)
    return grad_tree.total(), loss_tree.total()


def train_step(
    state: dict[str, np.ndarray], batch: np.ndarray, cfg: TrainConfig, backend: ModuleType, trace: Trace | None = None
) -> StepResult:
    """One full step on batch (M, B, T+1); trace op names start with "mb<m>/", "grad/", "loss", "update/"."""
    check_state(state, cfg)
    check_batch(batch, cfg)
    for m in range(cfg.micro_batches):
        check_tokens(batch[m], cfg.model)  # token ids are checked here, on the host, before the upload
    trace = host_trace(trace, backend)
    dstate = state_to_device(state, backend)
    grads, losses = sum_micro_batches_on(
        dstate, backend.to_device(batch), range(cfg.micro_batches), cfg, backend, trace
    )
    for name, t in grads.items():
        emit(trace, f"grad/{name}", t)
    loss = emit(trace, "loss", backend.div_scalar(losses, np.float32(cfg.micro_batches)))
    new = apply_update_on(dstate, grads, cfg, backend, trace)
    return StepResult(state=state_to_host(new, backend), loss=np.float32(backend.to_host(loss)))
