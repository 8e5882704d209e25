"""Matrix products of the `cpu` backend (docs/arithmetic.md 2.3), batched or not.

c[i, j] = left fold over k = 0..K-1 of a[i, k] * b[k, j], starting from +0.0:
`acc + (a * b)` per k in arithmetic version 1 (matmul_packed), `fma(a, b, acc)`
in version 2 (matmul_packed_fused); one source, two compiled kernels, since
`fused` is a literal each entry point hands down to kernels/cpu_tile.py and
kernels/cpu_scalar.mac_f32. Only the k order is pinned, so the kernel is free
to choose everything else:

- Both operands are packed once per call (pack_operands, one parallel pass):
  A into panels of TILE_ROWS rows stored k-major (K, TILE_ROWS), B into
  panels of TILE_COLS columns (K, TILE_COLS), whatever layout each was given
  in (a or aᵀ, b or bᵀ), the last panel padded with zeros. So the
  micro-kernel reads both operands of one k contiguously, every tile of C is
  a whole register tile (the padded rows and columns are computed and thrown
  away), and no operand row lands on the cache set of the next one (a row
  stride of 4 KiB would). The packed buffers are kept per thread between
  calls (_Scratch): a fresh one of hundreds of MB (the head's products) is
  a page fault per 4 KiB page on every call.
- A task is one (CHUNK_PANELS_A * TILE_ROWS rows) x (CHUNK_PANELS_B *
  TILE_COLS columns) block of C in one batch element; prange spreads tasks
  over the threads. Outputs are independent.
- The task keeps its accumulators in a buffer (the folds start at +0.0) and
  runs k as the OUTER loop, K_BLOCK values at a time: for each B panel of the
  block (K_BLOCK x 32 floats, 16 KiB, stays in L1) every A panel of the block
  goes through the register micro-kernel of kernels/cpu_tile.py, which loads
  its 12 x 32 tile of accumulators, folds K_BLOCK steps of k (version 1: per
  k two panel vectors, twelve broadcasts of A, 24 vmulps and 24 vaddps, no
  FMA; version 2: 24 vfmadd231ps), and stores the tile. The block's A panels
  (K_BLOCK x 192 floats) and B panels stay in L2 while the task runs.
  Each output gets exactly one fold step per k, k increasing, from +0.0: the
  left fold of the document.
"""

from __future__ import annotations

import threading

import numba
import numpy as np
from numba import njit, prange

from kernels.cpu_scalar import bits_from_f32, mac_f32
from kernels.cpu_tile import TILE_COLS, TILE_ROWS, fold_tile

K_BLOCK = 128  # k values folded per tile visit: a B panel's strip is 128 x 32 floats, 16 KiB of L1
CHUNK_PANELS_A = 16  # A panels (of TILE_ROWS rows) per task: 192 rows
CHUNK_PANELS_B = 12  # B panels (of TILE_COLS columns) per task: 384 columns
PACK_K = 256  # k values per packing task
TRANSPOSE_K = 16  # k values per block of a transposing pack: one 64-byte line of each source row
PACK_GROUP = 16  # panels per packing task of a k-major operand (its rows are read 16 panels wide)
NEG_ZERO_BITS = -(2**31)  # -0.0 as an int32


@njit(inline="always")
def _pack_k_major(src, z, x_count, k0, k1, q0, q1, dst):
    """dst[z, q, k, r] = src[z, k, q * W + r] (+0.0 past x_count) for q in [q0, q1), k in [k0, k1).

    src (BH, K, X) is read along its rows, W = dst.shape[3] values per panel.
    """
    width = dst.shape[3]
    for k in range(k0, k1):
        for q in range(q0, q1):
            base = q * width
            if base + width <= x_count:
                for r in range(width):
                    dst[z, q, k, r] = src[z, k, base + r]
            else:
                for r in range(width):
                    dst[z, q, k, r] = src[z, k, base + r] if base + r < x_count else np.float32(0.0)


@njit(inline="always")
def _pack_transposed(src, z, x_count, k0, k1, q, dst):
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
        _pack_k_major(src, z, x_count, k0, k1, q0, min(n_q, q0 + PACK_GROUP), dst)
    else:
        _pack_transposed(src, z, x_count, k0, k1, rest // k_chunks, dst)


def _pack_task_count(dst_shape: tuple[int, ...], k_major: bool, k_chunks: int) -> int:
    bh, n_q = dst_shape[0], dst_shape[1]
    return bh * k_chunks * ((n_q + PACK_GROUP - 1) // PACK_GROUP if k_major else n_q)


@njit(parallel=True, cache=True)
def pack_operands(a, a_transposed, b, b_transposed, ap, bp, a_tasks, b_tasks):
    """Fill the panels ap of A (BH, M, K) (or of aᵀ given as (BH, K, M)) and bp of B (BH, K, N) (or bᵀ (BH, N, K)).

    ap (BH, ceil(M / TILE_ROWS), K, TILE_ROWS): ap[z, p, k, r] = A[z, p * TILE_ROWS + r, k];
    bp (BH, ceil(N / TILE_COLS), K, TILE_COLS): bp[z, q, k, c] = B[z, k, q * TILE_COLS + c];
    +0.0 past M and N. a_tasks and b_tasks: the task counts of _pack_task_count.
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


# What a causal attention product may leave out (`causal` of matmul_packed). Each is exact only under
# the caller's preconditions (kernels/cpu.py checks them, else asks for FULL); a "tile" is the register
# tile of rows [i0, i1) and columns [j0, j0 + TILE_COLS):
FULL = 0  # every k of every output
K_UPTO_ROW = 1  # a tile folds k < i1 only: A[i, k] is +-0 for k > i, B finite
K_FROM_ROW = 2  # a tile folds k >= i0 only: A[i, k] is +-0 for k < i, B finite
COLS_UPTO_ROW = 3  # a tile whose columns all lie past its last row is not computed (left +0.0)


@njit(inline="always")
def _tile_k_range(causal, i0, j0, m, k_count):
    """The k range [lo, hi) that the tile at (i0, j0) folds under `causal` (A has m rows)."""
    i1 = min(m, i0 + TILE_ROWS)  # rows [i0, i1) are real
    if causal == K_UPTO_ROW:
        return 0, min(k_count, i1)
    if causal == K_FROM_ROW:
        return min(k_count, i0), k_count
    if causal == COLS_UPTO_ROW and j0 > i1 - 1:
        return 0, 0
    return 0, k_count


@njit(parallel=True, cache=True)
def matmul_packed(ap, bp, c, causal, row_chunks, col_chunks):
    """_matmul_packed in arithmetic version 1: acc + (a * b) per k."""
    _matmul_packed(ap, bp, c, causal, row_chunks, col_chunks, False)


@njit(parallel=True, cache=True)
def matmul_packed_fused(ap, bp, c, causal, row_chunks, col_chunks):
    """_matmul_packed in arithmetic version 2: fma(a, b, acc) per k."""
    _matmul_packed(ap, bp, c, causal, row_chunks, col_chunks, True)


def task_grid(bh: int, mp: int, nq: int, threads: int) -> tuple[int, int]:
    """(row_chunks, col_chunks): how the A panels (mp) and B panels (nq) of C are cut into tasks.

    At most CHUNK_PANELS_A A panels and CHUNK_PANELS_B B panels a task, the
    panels split as evenly as the counts allow (_chunk_bounds), and, where
    cutting one more row chunk can do it, bh * row_chunks * col_chunks a
    multiple of `threads`: prange hands each thread an equal run of tasks, so
    tasks of unequal size, or one task too many, leave a thread idle (16, 16,
    16, 16, 16, 6 panels with 2 threads: one ran 1,608 tiles, the other
    1,144). The grid changes no bit: each output's fold is the same in any
    task.
    """
    rows = max(1, -(-mp // CHUNK_PANELS_A))
    cols = max(1, -(-nq // CHUNK_PANELS_B))
    if threads > 1:
        for extra in range(threads):
            if (bh * (rows + extra) * cols) % threads == 0 and rows + extra <= mp:
                return rows + extra, cols
    return rows, cols


@njit(inline="always")
def _chunk_bounds(index, chunks, count):
    """[lo, hi) of chunk `index` of `count` items cut into `chunks` runs whose sizes differ by at most one."""
    return index * count // chunks, (index + 1) * count // chunks


@njit(inline="always")
def _matmul_packed(ap, bp, c, causal, row_chunks, col_chunks, fused):
    """C (BH, M, N), written into c, from the panels of pack_operands (ap of A (BH, M, K), bp of B (BH, K, N)).

    A task is one (batch element, run of A panels, run of B panels) block of
    C, the runs cut by task_grid's (row_chunks, col_chunks); it folds k from
    0 to K-1, K_BLOCK values at a time, into accumulators that start at +0.0.
    Preconditions: ap and bp come from one pack_operands call of operands
    with M rows and N columns; 1 <= row_chunks <= ap.shape[1], 1 <= col_chunks
    <= bp.shape[1].

    `causal` (FULL, K_UPTO_ROW, K_FROM_ROW, COLS_UPTO_ROW) leaves out terms
    that cannot change the fold: a fold starts at +0.0 and a round-to-nearest
    sum is -0.0 only when both addends are, so no accumulator is ever -0.0
    and adding a product +-0.0 (a zero of A times a finite B) changes nothing,
    wherever in the fold it falls. The terms kept are added in the same
    increasing k order.

    Version 2 (fused) differs in one place: fma(a, b, +0.0) of a negative
    product too small for float32 rounds to -0.0, so an accumulator can be
    -0.0 there, and a later term +0.0 (a masked +-0.0 times a finite b of the
    same sign) would turn it into +0.0. Leading terms are still safe to leave
    out (the accumulator is +0.0 until the first one kept), trailing ones
    (K_UPTO_ROW) are not: an accumulator that ends -0.0 is carried through the
    terms left out, in order (_finish_negative_zeros); they are rare.
    """
    bh, mp, k_count = ap.shape[0], ap.shape[1], ap.shape[2]
    nq = bp.shape[1]
    m, n = c.shape[1], c.shape[2]
    per_z = row_chunks * col_chunks
    for task in prange(bh * per_z):
        # Row chunks vary fastest: consecutive tasks share their B panels.
        z = task // per_z
        cc = (task - z * per_z) // row_chunks
        rc = task - z * per_z - cc * row_chunks
        p_lo, p_hi = _chunk_bounds(rc, row_chunks, mp)
        q_lo, q_hi = _chunk_bounds(cc, col_chunks, nq)
        acc = np.zeros(((p_hi - p_lo) * TILE_ROWS, (q_hi - q_lo) * TILE_COLS), np.float32)  # folds start at +0.0
        for k0 in range(0, k_count, K_BLOCK):
            k1 = min(k_count, k0 + K_BLOCK)
            for q in range(q_lo, q_hi):
                bpanel = bp[z, q]  # (K, TC)
                j0 = q * TILE_COLS
                for p in range(p_lo, p_hi):
                    lo, hi = _tile_k_range(causal, p * TILE_ROWS, j0, m, k_count)
                    s, e = max(lo, k0), min(hi, k1)
                    if s < e:
                        fold_tile(
                            ap[z, p], bpanel, acc, (p - p_lo) * TILE_ROWS, (q - q_lo) * TILE_COLS, s, e - s, fused
                        )
        if fused and causal == K_UPTO_ROW:
            for q in range(q_lo, q_hi):
                for p in range(p_lo, p_hi):
                    hi = _tile_k_range(causal, p * TILE_ROWS, q * TILE_COLS, m, k_count)[1]
                    if hi < k_count:
                        _finish_negative_zeros(
                            ap[z, p], bp[z, q], acc, (p - p_lo) * TILE_ROWS, (q - q_lo) * TILE_COLS, hi
                        )
        i_base, j_base = p_lo * TILE_ROWS, q_lo * TILE_COLS
        iw, jw = min(m, p_hi * TILE_ROWS) - i_base, min(n, q_hi * TILE_COLS) - j_base
        for i in range(iw):
            dst = c[z, i_base + i, j_base : j_base + jw]  # (jw,)
            src = acc[i]
            for j in range(jw):
                dst[j] = src[j]


@njit(inline="always")
def _finish_negative_zeros(apanel, bpanel, acc, i0, j0, k_lo):
    """Version 2: fold the terms k in [k_lo, K) into every accumulator of the tile at (i0, j0) that is -0.0.

    Every other accumulator is left as it is: those terms are +-0.0 (the
    caller's precondition), and fma(+-0.0, b, acc) is acc unless acc is -0.0.
    """
    k_hi = apanel.shape[0]
    for i in range(TILE_ROWS):
        for j in range(TILE_COLS):
            if bits_from_f32(acc[i0 + i, j0 + j]) == NEG_ZERO_BITS:
                x = acc[i0 + i, j0 + j]
                for k in range(k_lo, k_hi):
                    x = mac_f32(x, apanel[k, i], bpanel[k, j], True)
                acc[i0 + i, j0 + j] = x


@njit(cache=True)
def masked_zeros(p):
    """True if p (BH, T, T) is +-0.0 wherever j > t (the causal mask's zeros; NaN is not zero)."""
    bh, t_count, _ = p.shape
    for z in range(bh):
        for t in range(t_count):
            row = p[z, t]
            for j in range(t + 1, t_count):
                if row[j] != 0.0:
                    return False
    return True


class _Scratch(threading.local):
    """Per-thread buffers for the packed operands, kept between calls and grown to the largest asked for.

    A fresh buffer of hundreds of MB (the head's products) costs a page fault
    per 4 KiB page on every call, which measured up to half the product's own
    time; a kept one is faulted in once.
    """

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}

    def take(self, slot: str, shape: tuple[int, ...]) -> np.ndarray:
        size = int(np.prod(shape))
        buf = self.buffers.get(slot)
        if buf is None or buf.size < size:
            buf = np.empty(size, np.float32)
            self.buffers[slot] = buf
        return buf[:size].reshape(shape)


_SCRATCH = _Scratch()


def release_scratch() -> None:
    """Drop this thread's kept packing buffers (the next product allocates them afresh)."""
    _SCRATCH.buffers.clear()


def matmul_batched(
    a: np.ndarray,
    a_transposed: bool,
    b: np.ndarray,
    b_transposed: bool,
    n: int,
    causal: int = FULL,
    fused: bool = False,
) -> np.ndarray:
    """The product of two 3-d operands given in either layout; n is the output's column count.

    `causal`: see _matmul_packed. `fused`: arithmetic version 2's fold (fma)
    instead of version 1's. Precondition: the shapes agree (kernels/validate.py).
    """
    bh, m, k_count = (a.shape[0], a.shape[2], a.shape[1]) if a_transposed else a.shape
    ap = _SCRATCH.take("a", (bh, -(-m // TILE_ROWS), k_count, TILE_ROWS))  # (BH, MP, K, TR)
    bp = _SCRATCH.take("b", (bh, -(-n // TILE_COLS), k_count, TILE_COLS))  # (BH, NQ, K, TC)
    k_chunks = max(1, -(-k_count // PACK_K))
    a_tasks = _pack_task_count(ap.shape, a_transposed, k_chunks)
    b_tasks = _pack_task_count(bp.shape, not b_transposed, k_chunks)
    pack_operands(a, a_transposed, b, b_transposed, ap, bp, a_tasks, b_tasks)
    kernel = matmul_packed_fused if fused else matmul_packed
    rows, cols = task_grid(bh, ap.shape[1], bp.shape[1], numba.get_num_threads())
    # numpy's allocation: huge pages (numba's own faulted a head-sized C in 4 KiB at a time)
    out = np.empty((bh, m, n), np.float32)  # (BH, M, N)
    kernel(ap, bp, out, causal, rows, cols)
    return out
