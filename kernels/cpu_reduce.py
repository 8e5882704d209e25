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

from kernels.cpu_rowtree import COL_LEAF, col_tree16
from kernels.cpu_scalar import NEG_ZERO, ZERO, next_pow2, pmax_fast, psum_fast, tree_sum

ROWS_PER_TASK = 16  # rows handled by one prange task (amortises the scratch allocation)
COLS_PER_TASK = 32  # column block of sum_cols: 32 floats = two cache lines per row
LEAF_ROWS = 64  # rows folded per strided sub-tree of sum_cols (see _sum_col_block)
SERIAL_WIDTH = 1 << 14  # square_sum_flat's levels narrower than this run on one thread


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
def square_sum_flat(x):
    """psum(x * x) of the 1-d float32 array x, each square rounded once: psum_row's tree over the squares.

    The first level (pairs i, i + h, the squares made on the way) and every level wider than SERIAL_WIDTH
    are split between the threads, each level's pairs being independent; the narrow rest is tree_sum's.
    One long row's tree (a gradient's 2-norm) otherwise runs on one thread."""
    n = x.shape[0]
    if n <= 1:
        return x[0] * x[0] if n == 1 else ZERO
    h = next_pow2(n) >> 1  # h < n <= 2h
    s = np.empty(h, np.float32)  # (h,)
    for i in prange(n - h):
        s[i] = x[i] * x[i] + x[i + h] * x[i + h]
    for i in prange(n - h, h):
        s[i] = x[i] * x[i]  # the partner is -0.0 padding
    w = h
    while w > SERIAL_WIDTH:
        w >>= 1
        for i in prange(w):
            s[i] = s[i] + s[i + w]
    return tree_sum(s, w)


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
def _sum_cols_registers(x):
    """sum_cols for C a multiple of 16 and P = P2(R) >= 2 * COL_LEAF, trees in registers.

    The halving tree over P rows splits (see _sum_col_block) into, for each
    residue a < G = P / COL_LEAF, the 16-row tree over rows a, a + G, ...,
    a + 15G, then the halving tree over the G partial sums. Residues go to
    threads; each residue's tree runs in registers, 16 columns at a time
    (kernels/cpu_rowtree.col_tree16), and reads its 16 rows whole, so x
    streams through the caches in row order. The G x C partial sums then
    fold down in column blocks.
    """
    c_count = x.shape[1]
    groups = next_pow2(x.shape[0]) // COL_LEAF  # G
    pad = np.full(16, NEG_ZERO, np.float32)  # the padding rows (>= R) of col_tree16
    sums = np.empty((groups, c_count), np.float32)  # (G, C)
    for a in prange(groups):
        row = sums[a]  # (C,)
        for c0 in range(0, c_count, 16):
            col_tree16(x, a, groups, c0, pad, row, c0)
    out = np.empty(c_count, np.float32)  # (C,)
    n_tasks = (c_count + COLS_PER_TASK - 1) // COLS_PER_TASK
    for task in prange(n_tasks):
        c0 = task * COLS_PER_TASK
        c1 = min(c_count, c0 + COLS_PER_TASK)
        w = groups >> 1
        while w >= 1:
            for i in range(w):  # rows (i, i + w) of the partial sums
                lo = sums[i, c0:c1]
                hi = sums[i + w, c0:c1]
                for j in range(c1 - c0):
                    lo[j] = lo[j] + hi[j]
            w >>= 1
        first = sums[0, c0:c1]
        for j in range(c1 - c0):
            out[c0 + j] = first[j]
    return out


@njit(parallel=True, cache=True)
def _sum_cols_buffered(x):
    """sum_cols for any shape with R >= 2, strided sub-trees in small buffers."""
    r_count, c_count = x.shape
    out = np.empty(c_count, np.float32)  # (C,)
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


def sum_cols_2d(x: np.ndarray) -> np.ndarray:
    """psum down each column of x (R, C) -> (C,)."""
    r_count, c_count = x.shape
    if r_count == 0:
        return np.zeros(c_count, np.float32)  # +0.0 is psum of no rows
    out: np.ndarray
    if r_count == 1:
        out = x[0].copy()
    elif c_count % 16 == 0 and r_count > COL_LEAF:  # then P2(R) >= 2 * COL_LEAF
        out = _sum_cols_registers(x)
    else:
        out = _sum_cols_buffered(x)
    return out
