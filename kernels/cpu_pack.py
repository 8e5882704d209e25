"""Packing the operands of the `cpu` matmul into panels (kernels/cpu_matmul.py folds them).

A is packed into panels of TILE_ROWS rows stored k-major, (K, TILE_ROWS), B
into panels of TILE_COLS columns, (K, TILE_COLS), each from either layout it
was given in (a or aᵀ, b or bᵀ), the last panel padded with +0.0: so the
register micro-kernel (kernels/cpu_tile.py) reads both operands of one k
contiguously. Packing copies values and changes none; the fold order is the
matmul's alone.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels.cpu_tile import TILE_COLS, TILE_ROWS
from kernels.cpu_transpose import BLOCK_K, copy_12, copy_32, transpose_12, transpose_32

PACK_K = 256  # k values per packing task
TRANSPOSE_K = 16  # k values per block of a transposing pack: one 64-byte line of each source row
PACK_GROUP = 16  # panels per packing task of a k-major operand (its rows are read 16 panels wide)


@njit(inline="always")
def pack_k_major(src, z, x_count, k0, k1, q0, q1, dst):
    """dst[z, q, k, r] = src[z, k, q * W + r] (+0.0 past x_count) for q in [q0, q1), k in [k0, k1).

    src (BH, K, X) is read along its rows, W = dst.shape[3] values per panel.
    """
    width = dst.shape[3]
    rows = src[z]  # (K, X)
    vectors = src.strides[2] == 4 and (width == TILE_ROWS or width == TILE_COLS)  # copy_*'s preconditions
    for k in range(k0, k1):
        for q in range(q0, q1):
            base = q * width
            if base + width <= x_count:
                if vectors and width == TILE_COLS:
                    copy_32(rows, k, base, dst[z, q], k)  # two vector loads and stores
                elif vectors:
                    copy_12(rows, k, base, dst[z, q], k)
                else:
                    for r in range(width):
                        dst[z, q, k, r] = src[z, k, base + r]
            else:
                for r in range(width):
                    dst[z, q, k, r] = src[z, k, base + r] if base + r < x_count else np.float32(0.0)


@njit(inline="always")
def pack_transposed(src, z, x_count, k0, k1, q, dst):
    """dst[z, q, k, r] = src[z, q * W + r, k] (+0.0 past x_count) for k in [k0, k1).

    src (BH, X, K): the panel's W rows (W = dst.shape[3]) are copied
    TRANSPOSE_K values of k at a time, each row's run of k read in one go (one
    cache line) into the W x TRANSPOSE_K block of dst, which stays in L1.
    Reading the W rows side by side one k at a time instead (the first
    version) cost 2.7 ns an element single-threaded where the row stride is a
    multiple of 4 KiB (K = 1024 or 3072: every row's line falls in one L1
    set), against 0.7 ns this way (docs/benchmarks.md).
    """
    width = dst.shape[3]
    base = q * width
    valid = min(width, x_count - base)
    k0 = _transpose_blocks(src, z, valid, k0, k1, q, dst)  # whole blocks in registers, the rest below
    for kb in range(k0, k1, TRANSPOSE_K):
        kb1 = min(k1, kb + TRANSPOSE_K)
        for r in range(valid):
            row = src[z, base + r]  # (K,)
            for k in range(kb, kb1):
                dst[z, q, k, r] = row[k]
        for r in range(valid, width):
            for k in range(kb, kb1):
                dst[z, q, k, r] = 0.0


@njit(inline="always")
def _transpose_blocks(src, z, valid, k0, k1, q, dst):
    """pack_transposed's whole 16-k blocks from k0 on, through the register transpose; returns where it stopped.

    Only a panel whose rows all exist, of the micro-kernel's widths, from
    rows of unit stride (the intrinsics' preconditions); else nothing (k0).
    """
    width = dst.shape[3]
    if valid != width or src.strides[2] != 4 or (width != TILE_ROWS and width != TILE_COLS):
        return k0
    rows = src[z]  # (X, K)
    panel = dst[z, q]  # (K, W)
    base = q * width
    kb = k0
    while kb + BLOCK_K <= k1:
        if width == TILE_ROWS:
            transpose_12(rows, base, kb, panel)
        else:
            transpose_32(rows, base, kb, panel)
        kb += BLOCK_K
    return kb


@njit(inline="always")
def _pack_task(src, k_major, task, k_chunks, x_count, dst):
    """One packing task of one operand into its panels dst (BH, Q, K, W); see pack_operands."""
    n_q, k_count = dst.shape[1], dst.shape[2]
    per_z = (n_q + PACK_GROUP - 1) // PACK_GROUP * k_chunks if k_major else n_q * k_chunks
    z = task // per_z
    rest = task - z * per_z
    kc = rest % k_chunks
    k0, k1 = kc * PACK_K, min(k_count, kc * PACK_K + PACK_K)
    if k_major:
        q0 = rest // k_chunks * PACK_GROUP
        pack_k_major(src, z, x_count, k0, k1, q0, min(n_q, q0 + PACK_GROUP), dst)
    else:
        pack_transposed(src, z, x_count, k0, k1, rest // k_chunks, dst)


def pack_task_count(dst_shape: tuple[int, ...], k_major: bool, k_chunks: int) -> int:
    bh, n_q = dst_shape[0], dst_shape[1]
    return bh * k_chunks * ((n_q + PACK_GROUP - 1) // PACK_GROUP if k_major else n_q)


@njit(parallel=True, cache=True)
def pack_operands(a, a_transposed, b, b_transposed, ap, bp, a_tasks, b_tasks):
    """Fill the panels ap of A (BH, M, K) (or of aᵀ given as (BH, K, M)) and bp of B (BH, K, N) (or bᵀ (BH, N, K)).

    ap (BH, ceil(M / TILE_ROWS), K, TILE_ROWS): ap[z, p, k, r] = A[z, p * TILE_ROWS + r, k];
    bp (BH, ceil(N / TILE_COLS), K, TILE_COLS): bp[z, q, k, c] = B[z, k, q * TILE_COLS + c];
    +0.0 past M and N. a_tasks and b_tasks: the task counts of pack_task_count.
    Precondition: A's K equals B's K, same BH, ap and bp of those shapes.
    """
    k_count = ap.shape[2]
    k_chunks = max(1, (k_count + PACK_K - 1) // PACK_K)
    m = a.shape[2] if a_transposed else a.shape[1]
    n = b.shape[1] if b_transposed else b.shape[2]
    for task in prange(a_tasks + b_tasks):
        if task < a_tasks:
            _pack_task(a, a_transposed, task, k_chunks, m, ap)
        else:
            _pack_task(b, not b_transposed, task - a_tasks, k_chunks, n, bp)
