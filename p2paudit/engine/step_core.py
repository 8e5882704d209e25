"""The one definition of a training step's order of operations, configured by where its values live.

    for m in 0..M-1: grads_m, loss_m = forward + backward of micro-batch m    trace prefix mb<m>/
    G    = pairwise tree over grads_0 .. grads_{M-1}                           [grad/<p>]
    loss = pairwise tree over loss_0 .. loss_{M-1}, divided by M               [loss]
    for p in state order: p', m', v' = adamw(p, G[p] / M, m, v, ...)          [update/<p>/...]

`run_step` is that order, written once. Its configurations say where things
live, never in what order they are added:

- where a partial gradient sum waits for its sibling in the tree
  (`GradSums` over a `GradStore`: kept as it is, on the backend, or copied to
  the host, in memory or in spill files);
- where the moments come from (`Moments`: the whole state's, or read from a
  checkpoint one parameter at a time);
- where each new tensor goes (`Sink`: collected into a new state, or digested
  and written tensor by tensor);
- an optional trace (every operation's output, in order) and an optional
  progress hook (engine.progress).

engine.step.train_step and engine.streaming.streamed_step are two such
configurations; the distributed step (engine.distributed) uses the two halves,
`fold_micro_batches` over one rank's share and `update_params`. Arrays here are
the backend's own (engine.step moves them there and back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

import kernels
from kernels.backend_contract import Backend
from p2paudit.engine.backward import backward
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.model import LayerDone, Trace, emit, forward_checked, prefixed
from p2paudit.engine.progress import ProgressHook, StepProgress
from p2paudit.engine.schedule import lr_at
from p2paudit.engine.state import param_shapes
from p2paudit.errors import InputError, InternalError

T_ = TypeVar("T_")
Moments = Callable[[str], tuple[np.ndarray, np.ndarray]]  # param name -> (m, v) of the state before the step
Sink = Callable[[str, np.ndarray], None]  # receives each tensor of the new state, in the order they are made


class PartialSums(Protocol[T_]):
    """Where a finished partial sum of the pairwise tree waits for its sibling, and how it is added back."""

    def keep(self, partial: T_) -> object:
        """Keep `partial`; returns a handle. The caller drops its own references."""

    def add_kept(self, handle: object, newer: T_) -> T_:
        """kept + newer (the older sum on the left, as the tree adds), forgetting the kept sum."""

    def take(self, handle: object) -> T_:
        """The kept sum itself, forgotten here."""


class KeptInMemory(Generic[T_]):
    """PartialSums held as they are, added with `add`."""

    def __init__(self, add: Callable[[T_, T_], T_]) -> None:
        self._add = add
        self._kept: dict[object, T_] = {}
        self._next = 0

    def keep(self, partial: T_) -> object:
        self._next += 1
        self._kept[self._next] = partial
        return self._next

    def add_kept(self, handle: object, newer: T_) -> T_:
        return self._add(self.take(handle), newer)

    def take(self, handle: object) -> T_:
        return self._kept.pop(handle)


class PairwiseTree(Generic[T_]):
    """Sums items pushed one at a time by the fixed pairwise tree ((x0+x1)+(x2+x3))+... .

    Two partial sums are added as soon as both halves of a subtree exist, so at
    most log2(n) + 1 partial sums are held at once, and the adds (and their
    operand order: left + right) are exactly those of the level-by-level tree.
    Any aligned contiguous block of 2^j items is a subtree, which is what lets
    the distributed step sum each rank's share first and the shares after.

    Give `add` (sums wait in memory) or `waiting` (they wait where it keeps
    them). With `items`, the push that completes that many keeps the total in
    hand instead of handing it to `waiting` (a streamed step never spills it).
    """

    def __init__(
        self,
        add: Callable[[T_, T_], T_] | None = None,
        waiting: PartialSums[T_] | None = None,
        items: int | None = None,
    ) -> None:
        if waiting is None:
            if add is None:
                raise InternalError("PairwiseTree takes one of add and waiting")
            waiting = KeptInMemory(add)
        elif add is not None:
            raise InternalError("PairwiseTree takes one of add and waiting, not both")
        self._waiting: PartialSums[T_] = waiting
        self._stack: list[tuple[int, object]] = []  # (number of items summed, handle), sizes decreasing
        self._items = items
        self._total: list[T_] = []  # the sum of all `items`, once pushed
        self.count = 0

    def push(self, item: T_) -> None:
        size = 1
        while self._stack and self._stack[-1][0] == size:
            _, handle = self._stack.pop()
            item = self._waiting.add_kept(handle, item)
            size *= 2
        self.count += 1
        if self.count == self._items:
            self._total.append(item)
        else:
            self._stack.append((size, self._waiting.keep(item)))

    def total(self) -> T_:
        """The sum; precondition: a power-of-two number of items was pushed."""
        n = self.count
        if n < 1 or n & (n - 1):
            raise InputError(f"tree sum over {n} items, want a power of two")
        if self._total:
            return self._total[0]
        return self._waiting.take(self._stack[0][1])


class GradStore(Protocol):
    """Where a finished partial gradient sum waits for its sibling in the tree (run/spill.py: on disk)."""

    def put(self, grads: dict[str, np.ndarray]) -> object:
        """Keep `grads` (param name -> array); returns a handle. The caller drops its own references."""

    def take(self, handle: object, name: str) -> np.ndarray:
        """One tensor of a kept set."""

    def drop(self, handle: object) -> None:
        """Forget a kept set."""


class MemoryGradStore:
    """A GradStore in memory: keeps the arrays it is given, as they are."""

    def __init__(self) -> None:
        self._sets: dict[object, dict[str, np.ndarray]] = {}
        self._next = 0

    def put(self, grads: dict[str, np.ndarray]) -> object:
        self._next += 1
        self._sets[self._next] = dict(grads)
        return self._next

    def take(self, handle: object, name: str) -> np.ndarray:
        return self._sets[handle][name]

    def drop(self, handle: object) -> None:
        self._sets.pop(handle, None)


class GradSums:
    """PartialSums of gradient sets in a GradStore: kept as the backend's arrays, or (`on_host`) as host
    copies that go back up one tensor at a time when added. The newer set is added into in place, so a
    fold holds one set and one tensor, never two sets."""

    def __init__(self, store: GradStore, backend: Backend[Any], on_host: bool) -> None:
        self._store, self._be, self._on_host = store, backend, on_host

    def keep(self, partial: dict[str, np.ndarray]) -> object:
        if self._on_host:
            return self._store.put({name: self._be.to_host(g) for name, g in partial.items()})
        return self._store.put(partial)

    def _kept(self, handle: object, name: str) -> np.ndarray:
        kept = self._store.take(handle, name)
        return self._be.to_device(kept) if self._on_host else kept

    def add_kept(self, handle: object, newer: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for name in newer:  # older partial sum on the left, as engine.step.add_grads does
            newer[name] = self._be.add(self._kept(handle, name), newer[name])
        self._store.drop(handle)
        return newer

    def take(self, handle: object) -> dict[str, np.ndarray]:
        raise InternalError("a gradient fold keeps its total in hand (PairwiseTree items)")


def layer_reporter(progress: ProgressHook | None, finished: int, count: int, cfg: TrainConfig) -> LayerDone | None:
    """The on_layer callback of the micro-batch after the `finished` ones (of `count`): one "micro-batch"
    event a layer, forward and backward counted alike."""
    if progress is None:
        return None
    layers = 2 * cfg.model.n_layer
    passed = 0

    def on_layer() -> None:
        nonlocal passed
        passed += 1
        progress(StepProgress("micro-batch", finished, count, passed, layers))

    return on_layer


def micro_batch_grads_on(
    state: dict[str, np.ndarray],
    tokens: np.ndarray,
    cfg: TrainConfig,
    backend: Backend[Any],
    trace: Trace | None = None,
    on_layer: LayerDone | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One micro-batch's gradients (param name -> array) and 0-d loss, on the backend's arrays (checked)."""
    cache = forward_checked(state, tokens, cfg.model, backend, trace, on_layer=on_layer)
    grads = backward(cache, state, cfg.model, backend, trace, on_layer=on_layer)
    return grads, cache.loss


def fold_micro_batches(
    params: dict[str, np.ndarray],
    batch: np.ndarray,
    indices: range,
    cfg: TrainConfig,
    backend: Backend[Any],
    sums: PartialSums[dict[str, np.ndarray]],
    trace: Trace | None = None,
    progress: ProgressHook | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Tree sums of the gradients and losses of micro-batches `indices` (a power-of-two count).

    batch[i] is micro-batch indices[i]. Each micro-batch's gradients are folded
    into the tree as soon as they exist; partial sums wait in `sums`.
    """
    count = len(indices)
    grads: PairwiseTree[dict[str, np.ndarray]] = PairwiseTree(waiting=sums, items=count)
    losses: PairwiseTree[np.ndarray] = PairwiseTree(backend.add, items=count)
    for i, m in enumerate(indices):
        on_layer = layer_reporter(progress, i, count, cfg)
        g, loss = micro_batch_grads_on(params, batch[i], cfg, backend, prefixed(trace, f"mb{m}/"), on_layer)
        grads.push(g)
        losses.push(loss)
        del g
        if progress is not None:
            progress(StepProgress("micro-batch", i + 1, count, 0, 2 * cfg.model.n_layer))
    return grads.total(), losses.total()


def update_params(
    params: dict[str, np.ndarray],
    grads: dict[str, np.ndarray],
    counter: int,
    moments: Moments,
    sink: Sink,
    cfg: TrainConfig,
    backend: Backend[Any],
    trace: Trace | None = None,
    progress: ProgressHook | None = None,
) -> None:
    """AdamW update `counter` + 1 from the tree-summed `grads` (divided by M here), one parameter at a time.

    Each parameter's new p, m, v go to `sink` in that order, then the new step
    counter ("step", a host int64). Weight decay applies to matrices (2-d) only.
    """
    o, M = cfg.optim, cfg.micro_batches
    lr = lr_at(counter, o)
    shapes = param_shapes(cfg.model)
    for updated, (name, shape) in enumerate(shapes.items(), start=1):
        # exact unless subnormal: M is 2^j; G / 1.0 is G (NaN stays NaN), so M = 1 skips a pass over memory
        g = grads[name] if M == 1 else backend.div_scalar(grads[name], np.float32(M))
        g = emit(trace, f"update/{name}/grad", g)
        m, v = moments(name)
        wd = np.float32(o.weight_decay) if len(shape) == 2 else np.float32(0.0)
        p2, m2, v2 = backend.adamw(
            params["params/" + name], g, m, v,
            counter + 1, lr, np.float32(o.beta1), np.float32(o.beta2), np.float32(o.eps), wd,
        )  # fmt: skip
        del g, m, v
        sink("params/" + name, emit(trace, f"update/{name}/p", p2))
        sink("opt/m/" + name, emit(trace, f"update/{name}/m", m2))
        sink("opt/v/" + name, emit(trace, f"update/{name}/v", v2))
        del p2, m2, v2
        if progress is not None:
            progress(StepProgress("update", M, M, 0, 2 * cfg.model.n_layer, updated, len(shapes)))
    sink("step", np.array(counter + 1, dtype=np.int64))


def run_step(
    params: dict[str, np.ndarray],
    batch: np.ndarray,
    counter: int,
    cfg: TrainConfig,
    backend: Backend[Any],
    *,
    sums: PartialSums[dict[str, np.ndarray]],
    moments: Moments,
    sink: Sink,
    trace: Trace | None = None,
    progress: ProgressHook | None = None,
) -> np.ndarray:
    """One step from a state whose parameters are `params` and whose step counter is `counter`, on
    `batch` (M, B, T+1), all checked and on the backend; returns the 0-d loss. Trace op names start
    with "mb<m>/", "grad/", "loss", "update/"."""
    kernels.standard_float_modes()  # this thread's MXCSR as docs/arithmetic.md 1 wants it, whatever ran before
    grads, loss_sum = fold_micro_batches(params, batch, range(cfg.micro_batches), cfg, backend, sums, trace, progress)
    for name, t in grads.items():
        emit(trace, f"grad/{name}", t)
    loss = emit(trace, "loss", backend.div_scalar(loss_sum, np.float32(cfg.micro_batches)))
    update_params(params, grads, counter, moments, sink, cfg, backend, trace, progress)
    return loss
