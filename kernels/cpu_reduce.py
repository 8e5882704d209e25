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

from kernels.cpu_scalar import NEG_ZERO, next_pow2, pmax_row, psum_row

ROWS_PER_TASK = 16  # rows handled by one prange task (amortises the scratch allocation)
COLS_PER_TASK = 32  # column block of sum_cols: 32 floats = two cache lines per row


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
            out[r] = psum_row(x[r], s)
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
            out[r] = pmax_row(x[r], s)
    return out


@njit(inline="always")
def _sum_col_block(x, c0, cw, s):
    """psum down columns c0..c0+cw of x into s[0, :cw]. s: (>= P2(R) / 2, COLS_PER_TASK).

    Precondition: R >= 2. The first tree level (rows r and r + P/2) reads x
    directly; a row r + P/2 >= R is -0.0 padding, and x + (-0.0) == x, so
    those rows are copied.
    """
    r_count = x.shape[0]
    h = next_pow2(r_count) >> 1  # h < R <= 2h
    width = s.shape[1]
    for i in range(h):
        for j in range(cw, width):
            s[i, j] = NEG_ZERO  # unused lanes of a partial block: never read back
        if i + h < r_count:
            for j in range(cw):
                s[i, j] = x[i, c0 + j] + x[i + h, c0 + j]
        else:
            for j in range(cw):
                s[i, j] = x[i, c0 + j]
    flat = s.reshape(s.shape[0] * width)
    w = h >> 1
    while w >= 1:
        # rows (i, i + w) for i < w: two contiguous halves of the buffer
        for f in range(w * width):
            flat[f] = flat[f] + flat[f + w * width]
        w >>= 1


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
    h = next_pow2(r_count) >> 1
    n_tasks = (c_count + COLS_PER_TASK - 1) // COLS_PER_TASK
    for task in prange(n_tasks):
        s = np.empty((h, COLS_PER_TASK), np.float32)  # scratch (P/2, CB)
        c0 = task * COLS_PER_TASK
        cw = min(COLS_PER_TASK, c_count - c0)
        _sum_col_block(x, c0, cw, s)
        for j in range(cw):
            out[c0 + j] = s[0, j]
    return out
