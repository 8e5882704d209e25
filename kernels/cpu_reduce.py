"""Reductions of the `cpu` backend: sum_rows, sum_cols, max_rows (docs/arithmetic.md 2.1, 2.2).

Rows (or column blocks) are independent outputs, so prange splits them
between threads; inside one output the halving tree runs exactly as the
document writes it, on a scratch buffer padded with the operation's identity
(-0.0 for +, -inf for max2). The halves added at each level are contiguous,
which LLVM turns into vector adds.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels.cpu_scalar import NEG_ZERO, next_pow2, pmax_fast, psum_fast

ROWS_PER_TASK = 16  # rows handled by one prange task (amortises the scratch allocation)
COLS_PER_TASK = 32  # column block of sum_cols: 32 floats = two cache lines per row
LEAF_ROWS = 64  # rows folded per strided sub-tree of sum_cols (see _sum_col_block)


@njit(parallel=True, cache=True)
def sum_rows_2d(x):
    """psum of each row of x (R, C) -> (R,)."""
    r_count, c_count = x.shape
    out = np.empty(r_count, np.float32)  # (R,)
    p = next_pow2(c_count)
    n_tasks = (r_count + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        s = np.empty(p, np.float32)  # scratch (P2(C),)
        r0 = task * ROWS_PER_TASK
        for r in range(r0, min(r_count, r0 + ROWS_PER_TASK)):
            out[r] = psum_fast(x[r], s)
    return out


@njit(parallel=True, cache=True)
def max_rows_2d(x):
    """pmax of each row of x (R, C) -> (R,). Precondition: C >= 1."""
    r_count, c_count = x.shape
    out = np.empty(r_count, np.float32)  # (R,)
    p = next_pow2(c_count)
    n_tasks = (r_count + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        s = np.empty(p, np.float32)  # scratch (P2(C),)
        r0 = task * ROWS_PER_TASK
        for r in range(r0, min(r_count, r0 + ROWS_PER_TASK)):
            out[r] = pmax_fast(x[r], s)
    return out


@njit(inline="always")
def _tree_rows(t, rows, width):
    """Halving tree over the first `rows` rows of t (a power of two), vectorised across columns."""
    flat = t.reshape(t.shape[0] * width)
    w = rows >> 1
    while w >= 1:
        lo = flat[: w * width]  # rows (i, i + w) for i < w: two contiguous halves
        hi = flat[w * width : 2 * w * width]
        for f in range(w * width):
            lo[f] = lo[f] + hi[f]
        w >>= 1


@njit(inline="always")
def _sum_col_block(x, c0, cw, sums, t):
    """psum down columns c0..c0+cw of x into sums[0, :cw].

    Preconditions: R >= 2; sums (G, CB) and t (L / 2, CB) where P = P2(R) = G * L
    and L >= 2. The halving tree over P rows splits exactly: its levels
    w = P/2 .. G combine, for each residue a < G, only rows a, a + G, a + 2G, ...
    (the same halving tree over that strided sequence of L rows); the levels
    below G are the halving tree over those G partial sums. So each residue
    is folded in the small buffer t, and the buffers stay in L1 whatever R.
    A row index >= R is -0.0 padding, and x + (-0.0) == x.
    """
    r_count = x.shape[0]
    g = sums.shape[0]
    half = t.shape[0]  # L / 2
    width = t.shape[1]
    for a in range(g):
        for m in range(half):  # first level of the residue's tree: rows r and r + P/2
            dst = t[m]  # (CB,)
            r = a + m * g
            top = x[r, c0 : c0 + cw]  # (cw,); r < P/2 < R always
            if r + half * g < r_count:
                bottom = x[r + half * g, c0 : c0 + cw]
                for j in range(cw):
                    dst[j] = top[j] + bottom[j]
            else:
                for j in range(cw):
                    dst[j] = top[j]
            for j in range(cw, width):
                dst[j] = NEG_ZERO  # unused lanes of a partial block: never read back
        _tree_rows(t, half, width)
        sums[a] = t[0]
    _tree_rows(sums, g, width)


@njit(parallel=True, cache=True)
def sum_cols_2d(x):
    """psum down each column of x (R, C) -> (C,)."""
    r_count, c_count = x.shape
    out = np.zeros(c_count, np.float32)  # (C,); +0.0 is psum of no rows
    if r_count == 0:
        return out
    if r_count == 1:
        out[:] = x[0]
        return out
    p = next_pow2(r_count)
    leaf = min(p, LEAF_ROWS)  # L
    groups = p // leaf  # G
    n_tasks = (c_count + COLS_PER_TASK - 1) // COLS_PER_TASK
    for task in prange(n_tasks):
        sums = np.empty((groups, COLS_PER_TASK), np.float32)  # (G, CB)
        t = np.empty((leaf // 2, COLS_PER_TASK), np.float32)  # (L/2, CB)
        c0 = task * COLS_PER_TASK
        cw = min(COLS_PER_TASK, c_count - c0)
        _sum_col_block(x, c0, cw, sums, t)
        for j in range(cw):
            out[c0 + j] = sums[0, j]
    return out
