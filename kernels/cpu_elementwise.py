"""Elementwise kernels of the `cpu` backend: a sum, exp, log, SiLU and its backward, AdamW (new arrays or in place),
and the rows of a one-hot gradient.

All take flat (1-d, C-contiguous) float32 arrays; kernels/cpu.py reshapes.
Each output element depends on its own inputs only, so prange splits the
index range between threads and LLVM vectorises each chunk; the bits cannot
depend on either split.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels.cpu_scalar import ONE, exp_f32, log_f32


@njit(parallel=True, cache=True)
def add_flat(a, b, out):
    """out[i] = a[i] + b[i], rounded once, for 1-d float32 arrays of one length (out a new array)."""
    for i in prange(a.shape[0]):
        out[i] = a[i] + b[i]


@njit(parallel=True, cache=True)
def multiply_flat(a, b, out):
    """out[i] = a[i] * b[i], rounded once, for 1-d float32 arrays of one length (out may be a or b)."""
    for i in prange(a.shape[0]):
        out[i] = a[i] * b[i]


@njit(parallel=True, cache=True)
def binary_4d(x, y, multiply, out, rows_per_task):
    """out = x * y (multiply) or x + y, rounded once per element, for 4-d float32 arrays of out's shape in any
    strides (a broadcast's zeros, a slice's steps) and out C-contiguous. A task is up to rows_per_task (>= 1)
    consecutive rows of the third axis within one (i, j): its index arithmetic is done once, not per row
    (a rope's halves, (4, 8, 256, 16) with a step of 2: 63 -> 27 us)."""
    n0, n1, n2, n3 = out.shape
    blocks = (n2 + rows_per_task - 1) // rows_per_task
    for task in prange(n0 * n1 * blocks):
        ij = task // blocks
        k0 = (task - ij * blocks) * rows_per_task
        k1 = min(n2, k0 + rows_per_task)
        i = ij // n1
        j = ij - i * n1
        xs, ys, dst = x[i, j], y[i, j], out[i, j]  # (n2, n3) each
        if multiply:
            for k in range(k0, k1):
                for m in range(n3):
                    dst[k, m] = xs[k, m] * ys[k, m]
        else:
            for k in range(k0, k1):
                for m in range(n3):
                    dst[k, m] = xs[k, m] + ys[k, m]


@njit(parallel=True, cache=True)
def scale_flat(x, c, out):
    """out[i] = x[i] * c, rounded once, for a 1-d float32 array x and a float32 c (out may be x)."""
    for i in prange(x.shape[0]):
        out[i] = x[i] * c


@njit(parallel=True, cache=True)
def one_hot_rows(cols, value, out):
    """out[r, :] = +0.0, then out[r, cols[r]] = value where cols[r] >= 0: out (R, C) float32, cols (R,) int64
    below C, value float32; rows on every thread (no arithmetic: a fresh array's pages filled in parallel)."""
    zero = np.float32(0.0)
    for r in prange(out.shape[0]):
        row = out[r]  # (C,)
        for j in range(out.shape[1]):
            row[j] = zero
        c = cols[r]
        if c >= 0:
            row[c] = value


@njit(parallel=True, cache=True)
def exp_flat(x):
    """exp (section 3.1) of each element of the 1-d float32 array x."""
    y = np.empty_like(x)  # (n,)
    for i in prange(x.shape[0]):
        y[i] = exp_f32(x[i])
    return y


@njit(parallel=True, cache=True)
def log_flat(x):
    """log (section 3.2) of each element of the 1-d float32 array x."""
    y = np.empty_like(x)  # (n,)
    for i in prange(x.shape[0]):
        y[i] = log_f32(x[i])
    return y


@njit(parallel=True, cache=True)
def silu_flat(x):
    """x / (1 + exp(-x)) of each element (section 3.3)."""
    y = np.empty_like(x)  # (n,)
    for i in prange(x.shape[0]):
        xi = x[i]
        y[i] = xi / (ONE + exp_f32(-xi))
    return y


@njit(parallel=True, cache=True)
def silu_backward_flat(x, dy):
    """dy * g with g = s * (1 + x * (1 - s)) and s = 1 / (1 + exp(-x)) (section 3.3). x, dy: (n,)."""
    dx = np.empty_like(x)  # (n,)
    for i in prange(x.shape[0]):
        xi = x[i]
        s = ONE / (ONE + exp_f32(-xi))
        g = s * (ONE + xi * (ONE - s))
        dx[i] = dy[i] * g
    return dx


@njit(parallel=True, cache=True)
def adamw_into(p, g, m, v, b1, omb1, b2, omb2, ss, sbc2, decay, eps, p2, m2, v2):
    """One AdamW update (section 4.6) on flat arrays, written to p2, m2, v2 (which may be p, m, v
    themselves: each element is read before it is written).

    Preconditions: the scalars are float32 and were computed on the host as
    the document says (omb1 = 1 - beta1, omb2 = 1 - beta2, ss = lr / bc1,
    sbc2 = sqrt(bc2), decay = 1 - lr * weight_decay); p2, m2, v2 are of p's
    length. The caller allocates new ones with numpy, whose large arrays are
    backed by huge pages: numba's own allocator faulted them in 4 KiB at a
    time, more than half of the update's time (docs/benchmarks.md).
    """
    for i in prange(p.shape[0]):
        gi = g[i]
        mi = b1 * m[i] + omb1 * gi
        vi = b2 * v[i] + omb2 * (gi * gi)
        den = np.sqrt(vi) / sbc2 + eps
        p2[i] = p[i] * decay - ss * (mi / den)
        m2[i] = mi
        v2[i] = vi
