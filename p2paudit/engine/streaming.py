"""The same training step as engine.step.train_step, computed with bounded memory.

train_step holds the whole state (parameters and both AdamW moments), up to
log2(M) + 1 gradient sets of the micro-batch tree, and builds a whole new
state. For a 1B-parameter model that is several times the parameters' size.
Here the step keeps only

- the parameters and one gradient set: the gradients of the micro-batch being
  computed, into which the finished partial sums of the pairwise tree are
  folded as soon as both halves exist. A partial sum that must wait for its
  sibling is handed to a GradStore (on disk when memory is short) and taken
  back one tensor at a time when it is folded in;
- one micro-batch's activations, while it runs;
- during the update, a few tensors: for each parameter, its two moments are
  asked for (`moments(name)`), the AdamW update is applied, and the three new
  tensors are handed to `out(name, array)` (which digests or writes them) and
  dropped, so the moments never exist twice and the new state never exists whole.

The arithmetic is train_step's, op for op and in the same order: the pairwise
tree ((g0 + g1) + (g2 + g3)) + ... with the older partial sum on the left, the
division by M, the AdamW call with the same scalars. So the output tensors are
bitwise those of train_step (tests/audit/test_streamed_replay.py holds them
equal). As in engine.step, the work runs on the backend's arrays: the
parameters go up once, each micro-batch's tokens, each partial sum taken
back and each parameter's moments go up when needed, and what leaves (partial
sums to the store, new tensors to `out`) comes down (on the numpy backends
nothing moves). Nothing here reads a file: the stores and sinks are the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Protocol

import numpy as np

from p2paudit.engine.config import TrainConfig
from p2paudit.engine.model import check_tokens
from p2paudit.engine.schedule import lr_at
from p2paudit.engine.state import param_shapes
from p2paudit.engine.step import PairwiseTree, check_batch, micro_batch_grads_on, params_to_device
from p2paudit.errors import InputError

Moments = Callable[[str], tuple[np.ndarray, np.ndarray]]
Sink = Callable[[str, np.ndarray], None]


class GradStore(Protocol):
    """Where a finished partial gradient sum waits for its sibling in the tree."""

    def put(self, grads: dict[str, np.ndarray]) -> object:
        """Keep `grads` (param name -> array); returns a handle. The caller drops its own references."""

    def take(self, handle: object, name: str) -> np.ndarray:
        """One tensor of a kept set."""

    def drop(self, handle: object) -> None:
        """Forget a kept set."""


class MemoryGradStore:
    """Keeps partial sums in memory: train_step's memory, this module's order of work."""

    def __init__(self) -> None:
        self._sets: dict[int, dict[str, np.ndarray]] = {}
        self._next = 0

    def put(self, grads: dict[str, np.ndarray]) -> object:
        self._next += 1
        self._sets[self._next] = dict(grads)
        return self._next

    def take(self, handle: object, name: str) -> np.ndarray:
        return self._sets[handle][name]  # type: ignore[index]

    def drop(self, handle: object) -> None:
        self._sets.pop(handle, None)  # type: ignore[call-overload]


def check_params(params: dict[str, np.ndarray], cfg: TrainConfig) -> None:
    """InputError naming the first parameter ("params/<name>") missing, extra, or not float32 of its shape."""
    want = {"params/" + name: shape for name, shape in param_shapes(cfg.model).items()}
    extra = [n for n in params if n not in want]
    if extra:
        raise InputError(f"parameters include unexpected tensor {extra[0]} ({len(extra)} extra in all)")
    for name, shape in want.items():
        t = params.get(name)
        if not isinstance(t, np.ndarray) or t.dtype != np.float32 or t.shape != shape:
            raise InputError(f"parameter {name} is missing or not float32 {shape}")


def streamed_grads(
    params: dict[str, np.ndarray], batch: np.ndarray, cfg: TrainConfig, backend: ModuleType, store: GradStore
) -> tuple[dict[str, np.ndarray], np.float32]:
    """The tree-summed gradients of all micro-batches (param name -> the backend's arrays) and the
    tree-summed loss. At most one gradient set is held here at a time; waiting partial sums live in
    `store`, on the host. The parameters go to the backend's device once (engine.step.params_to_device)."""
    check_params(params, cfg)
    check_batch(batch, cfg)
    for m in range(cfg.micro_batches):
        check_tokens(batch[m], cfg.model)
    on_device = params_to_device(params, backend)
    losses: PairwiseTree[np.float32] = PairwiseTree(lambda a, b: np.float32(a + b))
    waiting: list[tuple[int, object]] = []  # (micro-batches summed, handle), sizes decreasing
    total: dict[str, np.ndarray] = {}
    for m in range(cfg.micro_batches):
        grads, loss = micro_batch_grads_on(on_device, backend.to_device(batch[m]), cfg, backend)
        losses.push(np.float32(backend.to_host(loss)))
        size = 1
        while waiting and waiting[-1][0] == size:
            _, handle = waiting.pop()
            for name in grads:  # older partial sum on the left, as add_grads does
                grads[name] = backend.add(backend.to_device(store.take(handle, name)), grads[name])
            store.drop(handle)
            size *= 2
        if m == cfg.micro_batches - 1:
            total = grads  # M is a power of two: the last push folds every partial sum into this one
        else:
            waiting.append((size, store.put({name: backend.to_host(g) for name, g in grads.items()})))
        del grads
    if waiting:
        raise InputError(f"micro_batches is {cfg.micro_batches}, want a power of two")
    return total, losses.total()


def streamed_update(
    params: dict[str, np.ndarray],
    grads: dict[str, np.ndarray],
    done: int,
    moments: Moments,
    out: Sink,
    cfg: TrainConfig,
    backend: ModuleType,
) -> None:
    """Apply AdamW update `done` + 1 one parameter at a time; each new tensor goes to `out` (on the host)
    in state order per parameter (params/<n>, opt/m/<n>, opt/v/<n>), then the new step counter ("step").
    `grads` are the backend's arrays (streamed_grads); `params` and the moments are numpy."""
    o = cfg.optim
    lr = lr_at(done, o)
    for name, shape in param_shapes(cfg.model).items():
        g = backend.div_scalar(grads[name], np.float32(cfg.micro_batches))  # exact unless subnormal: M is 2^j
        m, v = moments(name)
        if m.shape != shape or v.shape != shape or m.dtype != np.float32 or v.dtype != np.float32:
            raise InputError(f"moments of {name} are not float32 {shape}")
        wd = np.float32(o.weight_decay) if len(shape) == 2 else np.float32(0.0)
        p2, m2, v2 = backend.adamw(
            backend.to_device(params["params/" + name]), g, backend.to_device(m), backend.to_device(v),
            done + 1, lr, np.float32(o.beta1), np.float32(o.beta2), np.float32(o.eps), wd,
        )  # fmt: skip
        del g, m, v
        out("params/" + name, backend.to_host(p2))
        out("opt/m/" + name, backend.to_host(m2))
        out("opt/v/" + name, backend.to_host(v2))
        del p2, m2, v2
    out("step", np.array(done + 1, dtype=np.int64))


def streamed_step(
    params: dict[str, np.ndarray],
    done: int,
    moments: Moments,
    batch: np.ndarray,
    out: Sink,
    cfg: TrainConfig,
    backend: ModuleType,
    store: GradStore | None = None,
) -> np.float32:
    """train_step with bounded memory: `params` ("params/<name>" -> array) of a state whose step counter
    is `done`, its moments on demand, and the new state's tensors to `out`. Returns the step's loss."""
    if done < 0:
        raise InputError(f"state step is {done}, want >= 0")
    grads, losses = streamed_grads(params, batch, cfg, backend, MemoryGradStore() if store is None else store)
    loss = np.float32(losses / np.float32(cfg.micro_batches))
    streamed_update(params, grads, done, moments, out, cfg, backend)
    return loss
