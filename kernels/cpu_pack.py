"""Packing the operands of the `cpu` matmul into panels (kernels/cpu_matmul.py folds them).

A is packed into panels of TILE_ROWS rows stored k-major, KL = min(K,
K_BLOCK) values of k to a block: (BH, KB, MP, KL, TILE_ROWS), block kb
holding k in [kb * KL, (kb + 1) * KL) of every panel, one after the other. B is
packed into panels of TILE_COLS columns, (BH, NQ, K, TILE_COLS). Each from
either layout it was given in (a or aᵀ, b or bᵀ), the last panel padded with
+0.0 (the last k block's rows past K are never read): so the register
micro-kernel (kernels/cpu_tile.py) reads both operands of one k
contiguously, and the fold of one k block reads the A panels it visits in a
row as one contiguous stream. With A's panels whole (MP, K, TILE_ROWS), each
panel's slice of a k block started a new page and a new prefetch stream; one
thread's fold ran at 166-176 GFLOP/s that way against 191-194 blocked (the
micro-kernel's own rate from L1 is 190; docs/benchmarks.md). Packing copies
values and changes none; the fold order is the matmul's alone.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels.cpu_tile import TILE_COLS, TILE_ROWS
from kernels.cpu_transpose import BLOCK_K, copy_12, copy_32, transpose_12, transpose_32

K_BLOCK = 256  # k values per block of A's panels, and folded per register tile visit (kernels/cpu_matmul.py)
PACK_K = 2 * K_BLOCK  # k values per packing task (whole blocks of A)
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
    """One packing task of B into its panels dst (BH, Q, K, W); see pack_operands."""
    n_q, k_count = dst.shape[1], dst.shape[2]
    z, q_or_group, kc = _task_place(task, k_major, k_chunks, n_q)
    k0, k1 = kc * PACK_K, min(k_count, kc * PACK_K + PACK_K)
    if k_major:
        q0 = q_or_group * PACK_GROUP
        pack_k_major(src, z, x_count, k0, k1, q0, min(n_q, q0 + PACK_GROUP), dst)
    else:
        pack_transposed(src, z, x_count, k0, k1, q_or_group, dst)


@njit(inline="always")
def _pack_blocked_task(src, k_major, task, k_chunks, x_count, dst):
    """One packing task of A into its blocked panels dst (BH, KB, Q, KL, W): whole k blocks, each as B's.

    KL (dst.shape[3]) is K_BLOCK, or K itself when K is less (one block): whole blocks to a task either way."""
    n_q = dst.shape[2]
    k_count = src.shape[1] if k_major else src.shape[2]
    z, q_or_group, kc = _task_place(task, k_major, k_chunks, n_q)
    kl = dst.shape[3]
    for kb in range(kc * PACK_K // kl, min(dst.shape[1], (kc + 1) * PACK_K // kl)):
        k0, k1 = kb * kl, min(k_count, kb * kl + kl)
        block = dst[:, kb]  # (BH, Q, KL, W): k0..k1 as rows 0..k1-k0
        if k_major:
            q0 = q_or_group * PACK_GROUP
            pack_k_major(src[:, k0:k1], z, x_count, 0, k1 - k0, q0, min(n_q, q0 + PACK_GROUP), block)
        else:
            pack_transposed(src[:, :, k0:k1], z, x_count, 0, k1 - k0, q_or_group, block)


@njit(inline="always")
def _task_place(task, k_major, k_chunks, n_q):
    """(batch element, panel (or group of PACK_GROUP panels when k_major), k chunk) of packing task `task`."""
    per_z = (n_q + PACK_GROUP - 1) // PACK_GROUP * k_chunks if k_major else n_q * k_chunks
    z = task // per_z
    rest = task - z * per_z
    return z, rest // k_chunks, rest % k_chunks


def pack_task_count(bh: int, n_q: int, k_major: bool, k_chunks: int) -> int:
    """How many packing tasks pack_operands runs for an operand of bh batch elements and n_q panels."""
    return bh * k_chunks * ((n_q + PACK_GROUP - 1) // PACK_GROUP if k_major else n_q)


def a_panels_shape(bh: int, m: int, k: int) -> tuple[int, int, int, int, int]:
    """The shape of A's packing (BH, KB, MP, KL, TILE_ROWS) for A (BH, M, K): KL = min(K, K_BLOCK) (at least 1).

    A block as long as K where K is shorter: a block of K_BLOCK would pad a head's 64 k to 256 (four times the
    operand, and the padding was resident memory once a reused buffer had been written there)."""
    kl = max(1, min(k, K_BLOCK))
    return bh, max(1, -(-k // kl)), -(-m // TILE_ROWS), kl, TILE_ROWS


@njit(parallel=True, cache=True)
def pack_operands(a, a_transposed, b, b_transposed, ap, bp, a_tasks, b_tasks):
    """Fill the panels ap of A (BH, M, K) (or of aᵀ given as (BH, K, M)) and bp of B (BH, K, N) (or bᵀ (BH, N, K)).

    ap (a_panels_shape): ap[z, k // KL, p, k % KL, r] = A[z, p * TILE_ROWS + r, k];
    bp (BH, ceil(N / TILE_COLS), K, TILE_COLS): bp[z, q, k, c] = B[z, k, q * TILE_COLS + c];
    +0.0 past M and N. a_tasks and b_tasks: the task counts of pack_task_count (b_tasks 0: B is not packed).
    Precondition: A's K equals B's K, same BH, ap and bp of those shapes.
    """
    k_count = b.shape[2] if b_transposed else b.shape[1]
    k_chunks = max(1, (k_count + PACK_K - 1) // PACK_K)
    m = a.shape[2] if a_transposed else a.shape[1]
    n = b.shape[1] if b_transposed else b.shape[2]
    for task in prange(a_tasks + b_tasks):
        if task < a_tasks:
            _pack_blocked_task(a, a_transposed, task, k_chunks, m, ap)
        else:
            _pack_task(b, not b_transposed, task - a_tasks, k_chunks, n, bp)
