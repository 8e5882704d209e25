"""Large float32 + - * / on every processor: numpy's own loops over slices of the output, on a thread pool.

An elementwise result does not depend on how its elements are shared out, and
numpy's float loops release the GIL, so slices of the broadcast output along
one axis, each computed by the same ufunc on its threads, give numpy's bits
(the lab mode's arithmetic for these ops, docs/arithmetic.md section 8). The
ops it takes are the table's rounded binary ones on float32 arrays (or a
float32 scalar); anything else, or a result below THREADED_MIN elements, is
left to the caller (numpy on one thread, as before). It runs where the
kernels are idle (between them, on the op's caller's thread), so it adds no
threads to a busy core.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

F32 = np.float32
THREADED_MIN = 1 << 17  # elements of the result from which the slices are shared out
UFUNCS = (np.add, np.subtract, np.multiply, np.true_divide)

_pool: ThreadPoolExecutor | None = None


def _threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(_threads(), thread_name_prefix="lab-elementwise")
    return _pool


def _float32(x: Any) -> bool:
    return isinstance(x, np.float32) or (isinstance(x, np.ndarray) and x.dtype == F32)


def binary(fn: Any, x: Any, y: Any) -> np.ndarray | None:
    """fn(x, y) computed in slices on every processor, or None (nothing done) where this does not apply."""
    threads = _threads()
    if threads < 2 or not any(fn is u for u in UFUNCS) or not (_float32(x) and _float32(y)):
        return None
    shape = np.broadcast_shapes(np.shape(x), np.shape(y))
    if int(np.prod(shape, dtype=np.int64)) < THREADED_MIN:
        return None
    axis = next((i for i, n in enumerate(shape) if n >= threads), None)
    if axis is None:
        return None
    xb, yb = np.broadcast_to(x, shape), np.broadcast_to(y, shape)
    out = np.empty(shape, F32)
    bounds = [shape[axis] * k // threads for k in range(threads + 1)]

    def part(k: int) -> None:
        cut = (slice(None),) * axis + (slice(bounds[k], bounds[k + 1]),)
        with np.errstate(all="ignore"):  # as under the mode (a pool thread does not inherit its state)
            fn(xb[cut], yb[cut], out=out[cut])

    for done in [_executor().submit(part, k) for k in range(threads)]:
        done.result()
    return out
