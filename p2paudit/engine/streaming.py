"""The same training step as engine.step.train_step, computed with bounded memory.

train_step holds the whole state (parameters and both AdamW moments), up to
log2(M) + 1 gradient sets of the micro-batch tree, and builds a whole new
state. For a 1B-parameter model that is several times the parameters' size.
Here the step keeps only

- the parameters and one gradient set: the gradients of the micro-batch being
  computed, into which the finished partial sums of the pairwise tree are
  folded as soon as both halves exist. A partial sum that must wait for its
  sibling is copied to the host and handed to a GradStore (on disk when memory
  is short) and taken back one tensor at a time when it is folded in;
- one micro-batch's activations, while it runs;
- during the update, a few tensors: for each parameter, its two moments are
  asked for (`moments(name)`), the AdamW update is applied, and the three new
  tensors are handed to `out(name, array)` (which digests or writes them) and
  dropped, so the moments never exist twice and the new state never exists whole.

The order of operations is not written here: it is engine.step_core.run_step,
the one train_step runs, configured with those places (partial sums on the
host in `store`, moments on demand, new tensors to `out`). So the output
tensors are bitwise those of train_step (tests/audit/test_streamed_replay.py
holds them equal). The parameters and the batch go up to the backend once;
each partial sum taken back and each parameter's moments go up when needed,
and what leaves (partial sums to the store, new tensors to `out`) comes down
(on the numpy backends nothing moves). Nothing here reads a file: the stores
and sinks are the caller's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels.backend_contract import Backend
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.model import check_tokens
from p2paudit.engine.progress import ProgressHook
from p2paudit.engine.state import param_shapes
from p2paudit.engine.step import check_batch, params_to_device
from p2paudit.engine.step_core import GradStore, GradSums, MemoryGradStore, Moments, Sink, run_step
from p2paudit.errors import InputError

__all__ = ["GradStore", "MemoryGradStore", "Moments", "Sink", "check_params", "streamed_step"]


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


def checked_moments(moments: Moments, cfg: TrainConfig, backend: Backend[Any]) -> Moments:
    """`moments` (numpy) checked for dtype and shape (InputError), then moved to the backend."""
    shapes = param_shapes(cfg.model)

    def on_device(name: str) -> tuple[np.ndarray, np.ndarray]:
        m, v = moments(name)
        shape = shapes[name]
        if m.shape != shape or v.shape != shape or m.dtype != np.float32 or v.dtype != np.float32:
            raise InputError(f"moments of {name} are not float32 {shape}")
        return backend.to_device(m), backend.to_device(v)

    return on_device


def streamed_step(
    params: dict[str, np.ndarray],
    counter: int,
    moments: Moments,
    batch: np.ndarray,
    out: Sink,
    cfg: TrainConfig,
    backend: Backend[Any],
    store: GradStore | None = None,
    *,
    progress: ProgressHook | None = None,
) -> np.float32:
    """train_step with bounded memory: `params` ("params/<name>" -> array) of a state whose step counter
    is `counter`, its moments on demand, and the new state's tensors to `out` (numpy, in the order
    params/<n>, opt/m/<n>, opt/v/<n> per parameter, then "step"). Partial gradient sums wait in
    `store` (in memory when None). Returns the step's loss. `progress`: as for train_step."""
    if counter < 0:
        raise InputError(f"state step is {counter}, want >= 0")
    check_params(params, cfg)
    check_batch(batch, cfg)
    for m in range(cfg.micro_batches):
        check_tokens(batch[m], cfg.model)

    def to_host(name: str, array: np.ndarray) -> None:
        out(name, backend.to_host(array))

    loss = run_step(
        params_to_device(params, backend),
        backend.to_device(batch),
        counter,
        cfg,
        backend,
        sums=GradSums(MemoryGradStore() if store is None else store, backend, on_host=True),
        moments=checked_moments(moments, cfg, backend),
        sink=to_host,
        progress=progress,
    )
    return np.float32(backend.to_host(loss))
