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
FOLD_ROWS = 16  # square_sum_flat folds sixteen leaves of each residue at a time (four levels)
FOLD_LANES = 256  # residues a task of square_sum_flat (16 x 256 floats: 16 KiB in L1)
FOLD_MIN = FOLD_ROWS * SERIAL_WIDTH  # from this many leaves (P) square_sum_flat folds on the threads


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

    The halving tree over P = P2(n) leaves (the squares, then -0.0 padding) splits as sum_cols' does
    (_sum_col_block): its four widest levels (w = P/2 .. G, G = P / FOLD_ROWS) combine, for each residue
    a < G, only the leaves a, a + G, ..., a + 15G, by the halving tree over those sixteen; the levels
    below are the halving tree over the G results. So x is read once, FOLD_LANES residues a task (their
    sixteen rows in an L1 buffer, squared on the way, on every thread), and the G results fold the same
    way again until SERIAL_WIDTH are left for tree_sum. Writing the first level's P/2 sums to memory and
    halving them level by level read and wrote about three times x's bytes (a 125m embedding's gradient,
    38.6M floats). Below FOLD_MIN leaves the tree runs on one thread in a scratch buffer.
    """
    n = x.shape[0]
    if n <= 1:
        return x[0] * x[0] if n == 1 else ZERO
    p = next_pow2(n)
    if p < FOLD_MIN:
        s = np.empty(p, np.float32)  # (P,)
        for i in range(n):
            s[i] = x[i] * x[i]
        for i in range(n, p):
            s[i] = NEG_ZERO
        return tree_sum(s, p)
    g = p // FOLD_ROWS
    cur = np.empty(g, np.float32)  # (G,)
    for task in prange(g // FOLD_LANES):
        a0 = task * FOLD_LANES
        t = np.empty((FOLD_ROWS, FOLD_LANES), np.float32)  # leaves a0 + k * G + j, j < FOLD_LANES
        for k in range(FOLD_ROWS):
            base = a0 + k * g
            row = t[k]
            if base + FOLD_LANES <= n:
                src = x[base : base + FOLD_LANES]
                for j in range(FOLD_LANES):
                    row[j] = src[j] * src[j]
            else:
                for j in range(FOLD_LANES):
                    row[j] = x[base + j] * x[base + j] if base + j < n else NEG_ZERO
        _fold_rows16(t, cur, a0)
    while g > SERIAL_WIDTH:  # in place: a task reads its residues' sixteen rows, then writes their first
        g //= FOLD_ROWS
        for task in prange(g // FOLD_LANES):
            a0 = task * FOLD_LANES
            t = np.empty((FOLD_ROWS, FOLD_LANES), np.float32)
            for k in range(FOLD_ROWS):
                src = cur[a0 + k * g : a0 + k * g + FOLD_LANES]
                row = t[k]
                for j in range(FOLD_LANES):
                    row[j] = src[j]
            _fold_rows16(t, cur, a0)
    return tree_sum(cur, g)


@njit(inline="always")
def _fold_rows16(t, dst, a0):
    """dst[a0 + j] = the halving tree over t's FOLD_ROWS rows at column j (rows m and m + w, w = 8, 4, 2, 1)."""
    w = FOLD_ROWS >> 1
    while w >= 1:
        for m in range(w):
            lo = t[m]
            hi = t[m + w]
            for j in range(FOLD_LANES):
                lo[j] = lo[j] + hi[j]
        w >>= 1
    top = t[0]
    for j in range(FOLD_LANES):
        dst[a0 + j] = top[j]


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
