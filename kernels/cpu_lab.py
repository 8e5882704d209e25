"""Fused row kernels of the `cpu` backend for op table 1 (the lab mode; docs/arithmetic.md sections 8.5, 8.6).

Each computes, in one pass per row, exactly what the table's definition
composes from the backend's functions (max_rows, exp, sum_rows, log and
numpy's float32 + - *): the same halving trees (cpu_scalar's pmax_fast,
psum_fast, tree_max, tree_sum), the same exp_f32 and log_f32, one rounding
per written operation. So the bits are those of the composition
(tests/lab/test_lab_fused.py holds them equal on adversarial rows), without
its temporaries and kernel launches:

    log_softmax(x)                 (R, C) -> x - (m + log(s)) per row, C >= 1
    log_softmax_backward(y, dy)    (R, C) x2 -> dy - exp(y) * psum(dy) per row
    attention_lse(q, k, v, fused)  (BH, T, D) x3 -> (o, p, lse (BH*T,)): cpu.attention's o and p (the masked
                                   half skipped) and each row's log-sum-exp m + log(s) over j <= t
    attention_lse_unkept(q, k, v, fused)  (o, lse) of attention_lse without p (a panel's rows at a time)
    attention_backward_recomputed(q, k, v, do, fused)  (dq, dk, dv) of attention_lse's own p, recomputed a
                                   block of rows at a time (kernels/cpu_attention_recompute.py)
    adamw_in_place(p, g, m, v, ...) cpu.adamw's update written into p, m and v themselves (the same kernel,
                                   kernels/cpu_elementwise.py adamw_into), not into new arrays to copy back
    binary(a, b, op)               a + b, a - b, a * b or a / b with numpy's broadcasting, any strides, on every
                                   thread for float32 results from 64K elements (numpy's run on one; from 64K
                                   numba's were faster, 6 vs 13 us): one rounding per element, numpy's bits
                                   (NaN's pattern aside, which the table leaves open, section 1)
    scale_in_place(x, c)           x *= c on every thread, the same
    square_sum(x)                  psum(x * x) over all of a large x, the tree's wide levels on every thread
                                   (kernels/cpu_reduce.py square_sum_flat): a gradient's 2-norm
    one_hot(shape, cols, value)    nll_loss_backward's gradient: +0.0 but `value` at (r, cols[r]) where
                                   cols[r] >= 0, its rows written on every thread

The numba kernels are in kernels/cpu_nn.py (log_softmax_2d,
log_softmax_backward_2d) and kernels/cpu_attention.py (attention_rows); this module
is their face.
"""

from __future__ import annotations

import sys
import threading

import numba
import numpy as np
from numpy.lib.stride_tricks import as_strided

from kernels import (
    cpu_compile_notice,  # noqa: F401  (before any kernel is called: a compile is told)
    validate,
)
from kernels.adamw_scalars import adamw_scalars
from kernels.backend_contract import Scalar
from kernels.cpu_attention import attention_backward_checked, attention_rows, attention_rows_unkept
from kernels.cpu_attention_recompute import attention_backward_recomputed as attention_backward_recomputed
from kernels.cpu_elementwise import ADD as ADD  # binary's operations, for the lab's entries
from kernels.cpu_elementwise import DIVIDE as DIVIDE
from kernels.cpu_elementwise import MULTIPLY as MULTIPLY
from kernels.cpu_elementwise import NEGATE as NEGATE
from kernels.cpu_elementwise import SUBTRACT as SUBTRACT
from kernels.cpu_elementwise import adamw_into, binary_rows, one_hot_rows, scale_flat
from kernels.cpu_nn import log_softmax_2d, log_softmax_backward_2d
from kernels.cpu_reduce import square_sum_flat

F32 = np.float32


def _refs(buffers: dict[str, np.ndarray], slot: str) -> int:
    """sys.getrefcount of buffers[slot], through one local name."""
    buf = buffers[slot]
    return sys.getrefcount(buf)


_UNHELD = _refs({"probe": np.empty(1, F32)}, "probe")  # the count of a buffer nothing else holds


class _KeptOutputs(threading.local):
    """This thread's output arrays of the vocabulary-wide ops, handed out again once nothing holds them.

    A step's log-softmax, its backward and nll_loss's one-hot gradient are (tokens, vocabulary) arrays
    (206 MB each at 125m); a fresh one is either 4 KiB pages faulted in anew wherever the heap has no
    free block that large (40K faults, 0.1-0.2 s, in a 125m step beside stock torch's) or, through
    numpy's allocation, huge pages that the kernel advises and zeroes on every call (slower at 11m).
    A kept array is reused only when its reference count shows that no tensor, view or array holds it
    (the op's previous result is gone: autograd drops it after the backward); else a new one is made
    and kept. Every element of a reused array is written again by the kernel it is given to.
    """

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def empty(self, slot: str, shape: tuple[int, ...]) -> np.ndarray:
        if slot in self.buffers and self.buffers[slot].shape == shape and _refs(self.buffers, slot) == _UNHELD:
            return self.buffers[slot]
        self.buffers[slot] = np.empty(shape, F32)
        return self.buffers[slot]


_KEPT = _KeptOutputs()


def log_softmax(x: np.ndarray) -> np.ndarray:
    """x (R, C), C >= 1 -> x - (m + log(s)) per row."""
    validate.check_rows(x, min_cols=1)
    out = _KEPT.empty("log_softmax", x.shape)
    log_softmax_2d(x, out)
    return out


def log_softmax_backward(y: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """y, dy (R, C) -> dy - exp(y) * psum(dy) per row."""
    validate.check_rows(y, "y")
    validate.check_pair(y, "y", dy, "dy")
    out = _KEPT.empty("log_softmax_backward", y.shape)
    log_softmax_backward_2d(y, dy, out)
    return out


def attention_lse(q: np.ndarray, k: np.ndarray, v: np.ndarray, fused: bool) -> tuple[np.ndarray, ...]:
    """(o (BH, T, D), p (BH, T, T), lse (BH*T,)): kernels.cpu.attention's o and p, bit for bit (the same
    kernel, kernels/cpu_attention.py), and each row's log-sum-exp from the softmax's own m and s."""
    validate.check_attention(q, k, v)
    # +0.0 x inf is NaN: with a non-finite v the full fold must see the masked terms
    return attention_rows(q, k, v, not bool(np.isfinite(v).all()), fused)


def attention_lse_unkept(q: np.ndarray, k: np.ndarray, v: np.ndarray, fused: bool) -> tuple[np.ndarray, ...]:
    """(o, lse) of attention_lse, the same bits, p never held whole (attention_backward_recomputed needs none)."""
    validate.check_attention(q, k, v)
    return attention_rows_unkept(q, k, v, not bool(np.isfinite(v).all()), fused)


def attention_backward_of_own_p(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, p: np.ndarray, do: np.ndarray, fused: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """kernels.cpu.attention_backward's (dq, dk, dv), bit for bit, for a p that attention_lse made.

    The backend's entry reads the whole masked half of p (kernels/cpu_matmul.masked_zeros: 2 ms a 125m
    layer) to know that its entries are +0.0 before it leaves their terms out; the lab keeps the p of
    its own forward (OpContext.save_attention, out of the script's reach), whose masked entries the
    softmax wrote +0.0 (cpu_nn.causal_softmax_row), so only the inputs' finiteness decides."""
    return attention_backward_checked(q, k, v, p, do, fused, lambda: True)


def adamw_in_place(
    p: np.ndarray,
    g: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    step: int,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    eps: Scalar,
    weight_decay: Scalar,
) -> None:
    """kernels.cpu.adamw's update (section 4.6), the same bits, written into p, m and v (C-contiguous)."""
    step = validate.check_adamw(p, g, m, v, step)
    k = adamw_scalars(step, lr, beta1, beta2, eps, weight_decay)
    flat = (p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1))  # views: C-contiguous, checked
    adamw_into(*flat, k.b1, k.omb1, k.b2, k.omb2, k.ss, k.sbc2, k.decay, k.eps, flat[0], flat[2], flat[3])


PARALLEL_MIN = 1 << 16  # elements from which binary, scale_in_place and square_sum run on every thread
TASKS_PER_THREAD = 4  # binary's tasks per thread (prange hands each thread an equal run of them)


def binary(a: np.ndarray | np.float32, b: np.ndarray | np.float32, op: int) -> np.ndarray | None:
    """a op b (kernels/cpu_elementwise ADD, SUBTRACT, MULTIPLY, DIVIDE; NEGATE: -a, b a float32 scalar not read)
    with numpy's broadcasting, on every thread, for float32 arrays (or float32 scalars) in any non-negative
    strides whose result has at least PARALLEL_MIN elements; None (nothing computed) otherwise. One rounding
    per element: numpy's bits. The geometry is planned once per layout (shapes, strides, threads).

    The operands' axes are broadcast, axes of size 1 dropped and neighbours that both operands step through
    as one run merged (a norm's (B, T, C) x (C,) is (B*T, C) with the weight's row stride 0), so the inner
    loop walks unit or zero strides that LLVM vectorises; more than four axes left: None."""
    x, y = np.asarray(a), np.asarray(b)
    if x.dtype != F32 or y.dtype != F32:
        return None
    threads = numba.get_num_threads()
    key = (x.shape, x.strides, y.shape, y.strides, threads)
    try:
        plan = _PLANS[key]
    except KeyError:
        plan = _plan(x, y, threads)
        if len(_PLANS) >= _PLANS_KEPT:  # a bound: a script of ever new shapes does not grow it without end
            _PLANS.clear()
        _PLANS[key] = plan
    if plan is None:
        return None
    shape, g = plan
    out = np.empty(shape, F32)
    binary_rows(op, _flat(x), _flat(y), out.reshape(-1), g)
    return out


_PLANS: dict[tuple[object, ...], tuple[tuple[int, ...], np.ndarray] | None] = {}  # binary's plan per layout
_PLANS_KEPT = 4096


def _plan(x: np.ndarray, y: np.ndarray, threads: int) -> tuple[tuple[int, ...], np.ndarray] | None:
    """(the result's shape, binary_rows' geometry g) for operands of x's and y's shapes and strides, or None
    where binary computes nothing (_broadcast_geometry's refusals)."""
    geometry = _broadcast_geometry(x, y)
    if geometry is None:
        return None
    shape, sizes, strides = geometry
    rows, cols = sizes[0] * sizes[1] * sizes[2], sizes[3]
    wanted = TASKS_PER_THREAD * threads
    if rows >= wanted:
        per_task = (-(-rows // wanted), cols)
    else:  # few long rows: their columns cut too, in whole vectors of 16
        blocks = min(-(-wanted // rows), -(-cols // 16))
        per_task = (1, (cols + 16 * blocks - 1) // (16 * blocks) * 16)
    g = np.array([*sizes, *strides[0], *strides[1], *per_task], np.int64)
    g.flags.writeable = False  # shared by every call of this layout
    return shape, g


def power(x: np.ndarray, e: int) -> np.ndarray | None:
    """x ** e for an integer e >= 2 as the left fold of products x * x * ... * x (one rounding each), on every
    thread through binary; None (nothing computed) where binary declines x."""
    y = binary(x, x, MULTIPLY)
    for _ in range(e - 2):
        if y is None:
            break
        y = binary(y, x, MULTIPLY)
    return y


def _flat(x: np.ndarray) -> np.ndarray:
    """x's memory from its first element to its last as a flat array (x's strides >= 0, in whole elements)."""
    if x.flags.c_contiguous:
        return x.reshape(-1)
    extent = 1 + sum((n - 1) * (s // x.itemsize) for n, s in zip(x.shape, x.strides))
    return as_strided(x, shape=(extent,), strides=(x.itemsize,))


def _broadcast_geometry(
    x: np.ndarray, y: np.ndarray
) -> tuple[tuple[int, ...], list[int], tuple[list[int], list[int]]] | None:
    """(the result's shape, its four merged sizes, x's and y's strides over them in elements), or None: shapes
    that do not broadcast (numpy's own error follows), a negative or partial-element stride, fewer than
    PARALLEL_MIN elements, more than four axes after merging."""
    nd = max(x.ndim, y.ndim)
    shapes = [(1,) * (nd - v.ndim) + v.shape for v in (x, y)]
    strides = [(0,) * (nd - v.ndim) + v.strides for v in (x, y)]
    shape: list[int] = []
    axes: list[list[int]] = []  # [size, x's stride, y's stride] of each axis longer than 1
    for nx, ny, sx, sy in zip(*shapes, *strides):
        n = nx if ny == 1 else ny
        if (nx != n and nx != 1) or sx < 0 or sy < 0 or sx % 4 or sy % 4:
            return None
        shape.append(n)
        if n != 1:
            step = [n, sx // 4 if nx == n else 0, sy // 4 if ny == n else 0]
            last = axes[-1] if axes else None
            if last is not None and last[1] == step[1] * n and last[2] == step[2] * n:
                last[0], last[1], last[2] = last[0] * n, step[1], step[2]  # one run through both operands
            else:
                axes.append(step)
    total = 1
    for n in shape:
        total *= n
    if total < PARALLEL_MIN or len(axes) > 4:
        return None
    axes = [[1, 0, 0]] * (4 - len(axes)) + axes
    return tuple(shape), [v[0] for v in axes], ([v[1] for v in axes], [v[2] for v in axes])


def scale_in_place(x: np.ndarray, c: np.float32) -> bool:
    """x *= c on every thread where x is a large C-contiguous float32 array; False (x untouched) otherwise."""
    if x.dtype != F32 or x.size < PARALLEL_MIN or not x.flags.c_contiguous or not x.flags.writeable:
        return False
    flat = x.reshape(-1)
    scale_flat(flat, F32(c), flat)
    return True


def one_hot(shape: tuple[int, int], cols: np.ndarray, value: np.float32) -> np.ndarray:
    """An (R, C) float32 array nothing else holds, +0.0 but `value` at (r, cols[r]) for each cols[r] >= 0
    (cols (R,) int64 < C)."""
    rows, width = shape
    if cols.shape != (rows,) or cols.dtype != np.int64 or (rows and int(cols.max()) >= width):
        raise ValueError(f"one_hot: cols {cols.shape} {cols.dtype} do not index the rows of {shape}")
    out = _KEPT.empty("one_hot", shape)
    one_hot_rows(np.ascontiguousarray(cols), F32(value), out)
    return out


def square_sum(x: np.ndarray) -> np.float32 | None:
    """psum(x * x) over every element of x in C order, or None (nothing computed) unless x is a C-contiguous
    float32 array of at least PARALLEL_MIN elements (below that one thread is as fast)."""
    if x.dtype != F32 or x.size < PARALLEL_MIN or not x.flags.c_contiguous:
        return None
    return F32(square_sum_flat(x.reshape(-1)))
