"""Matrix products of the `cpu` backend (docs/arithmetic.md 2.3), batched or not.

c[i, j] = left fold over k = 0..K-1 of a[i, k] * b[k, j], starting from +0.0.
Only the k order is pinned, so the kernel is free to choose everything else:

- B is packed into column panels of PANEL_COLS columns, each panel a
  contiguous (K, PANEL_COLS) block, so the inner loop streams unit-stride
  memory whatever B's layout (b or bᵀ) and no panel row lands on the same
  cache set as the next (a row stride of 4 KiB would). A plain B of at most
  PANEL_COLS columns is one panel already and is not copied.
- A task is one (ROW_BLOCK rows) x (one panel) block of C in one batch
  element; prange spreads tasks over the threads. Outputs are independent.
- The task keeps its (ROW_BLOCK, PANEL_COLS) accumulators in a small buffer
  and runs k as the OUTER loop, K_BLOCK values of A packed k-major at a
  time. Whole 8 x 32 tiles of the buffer go through the register-blocked
  micro-kernel of kernels/cpu_tile.py: 16 zmm accumulators loaded once,
  then per k two panel vectors, eight broadcasts of A, 16 vmulps and 16
  vaddps (no FMA: plain fmul then fadd, no fast-math flags), then stored
  once. The edges of the block use a vectorised loop with the accumulators
  in L1. Either way each output gets exactly one `acc + a[i, k] * b[k, j]`
  per k, k increasing, from +0.0: the left fold of the document.

"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels.cpu_tile import TILE_COLS, TILE_ROWS, fold_tile

PANEL_COLS = 128  # columns of a packed B panel (512 bytes per panel row)
ROW_BLOCK = 32  # rows of C per task: each B panel row fetched from L2 serves 32 rows from L1
K_BLOCK = 128  # k values of A packed at a time: a tile's panel strip (16 KiB) and the packed A block (16 KiB) share L1


@njit(parallel=True, cache=True)
def pack_panels(b, b_transposed):
    """Pack b (BH, K, N), or bᵀ given as (BH, N, K), into panels (BH, NP, K, PANEL_COLS).

    Columns of the last panel past N are left unset and never read.
    """
    if b_transposed:
        bh, n, k_count = b.shape
    else:
        bh, k_count, n = b.shape
    n_panels = (n + PANEL_COLS - 1) // PANEL_COLS
    bp = np.empty((bh, n_panels, k_count, PANEL_COLS), np.float32)  # (BH, NP, K, PC)
    for task in prange(bh * n_panels):
        z = task // n_panels
        j0 = (task - z * n_panels) * PANEL_COLS
        jw = min(PANEL_COLS, n - j0)
        panel = bp[z, task - z * n_panels]  # (K, PC)
        if b_transposed:
            for jj in range(jw):
                src = b[z, j0 + jj]  # (K,) one row of bᵀ is one column of b
                for k in range(k_count):
                    panel[k, jj] = src[k]
        else:
            for k in range(k_count):
                src = b[z, k]  # (N,)
                for jj in range(jw):
                    panel[k, jj] = src[j0 + jj]
    return bp


@njit(inline="always")
def _pack_a_block(a, a_transposed, z, i0, iw, k0, kw, ablk):
    """ablk[kk, i] = A[z, i0 + i, k0 + kk] for i < iw, kk < kw; a holds aᵀ if a_transposed.

    k-major, so the fold reads the ROW_BLOCK multipliers of one k contiguously.
    """
    if a_transposed:
        for kk in range(kw):
            src = a[z, k0 + kk, i0 : i0 + iw]  # (iw,) one row of aᵀ is one column of A
            dst = ablk[kk]
            for i in range(iw):
                dst[i] = src[i]
    else:
        for i in range(iw):
            src = a[z, i0 + i, k0 : k0 + kw]  # (kw,)
            for kk in range(kw):
                ablk[kk, i] = src[kk]


@njit(inline="always")
def _fold_region(ablk, i_lo, i_hi, kw, panel, k0, j_lo, j_hi, acc):
    """acc[i, j] += ablk[kk, i] * panel[k0 + kk, j] for kk = 0..kw-1 in order, i in [i_lo, i_hi), j in [j_lo, j_hi).

    The edge path for what the register tiles do not cover: the accumulators
    live in the L1 buffer, the j loop is vectorised.
    """
    for kk in range(kw):  # k outermost: each accumulator sees k in increasing order
        brow = panel[k0 + kk, j_lo:j_hi]  # contiguous
        arow = ablk[kk]  # (RB,)
        for i in range(i_lo, i_hi):
            aik = arow[i]
            row = acc[i, j_lo:j_hi]  # contiguous, in L1
            for j in range(j_hi - j_lo):
                row[j] = row[j] + aik * brow[j]


@njit(inline="always")
def _fold_block(ablk, iw, kw, panel, k0, jw, acc):
    """acc[i, j] += fold over kk < kw of ablk[kk, i] * panel[k0 + kk, j], for i < iw, j < jw.

    Whole TILE_ROWS x TILE_COLS tiles go through the register micro-kernel;
    the right and bottom edges through _fold_region. Every output is touched
    by exactly one of them, with k in the same increasing order.
    """
    iw_t = iw - iw % TILE_ROWS
    jw_t = jw - jw % TILE_COLS
    for j0 in range(0, jw_t, TILE_COLS):
        for i0 in range(0, iw_t, TILE_ROWS):
            fold_tile(ablk, panel, acc, i0, j0, k0, kw)
    if jw_t < jw:
        _fold_region(ablk, 0, iw_t, kw, panel, k0, jw_t, jw, acc)
    if iw_t < iw:
        _fold_region(ablk, iw_t, iw, kw, panel, k0, 0, jw, acc)


# What a causal attention product may leave out (`causal` of matmul_packed). Each is exact only under
# the caller's preconditions (kernels/cpu.py checks them, else asks for FULL):
FULL = 0  # every k of every output
K_UPTO_ROW = 1  # row block [i0, i0 + iw) folds k < i0 + iw only: A[i, k] is +-0 for k > i, B finite
K_FROM_ROW = 2  # row block [i0, i0 + iw) folds k >= i0 only: A[i, k] is +-0 for k < i, B finite
COLS_UPTO_ROW = 3  # column panels starting past the block's last row are not computed (set to +0.0)


@njit(parallel=True, cache=True)
def matmul_packed(a, a_transposed, bp, n, causal):
    """C (BH, M, N) from A (BH, M, K) (or aᵀ given as (BH, K, M)) and B panels bp (BH, NP, K, PW).

    A task is one (batch element, ROW_BLOCK rows, panel) block of C; it folds
    k from 0 to K-1, K_BLOCK values of A at a time, into accumulators that
    start at +0.0. Precondition: PW <= PANEL_COLS.

    `causal` (FULL, K_UPTO_ROW, K_FROM_ROW, COLS_UPTO_ROW) leaves out terms
    that cannot change the fold: a fold starts at +0.0 and a round-to-nearest
    sum is -0.0 only when both addends are, so no accumulator is ever -0.0
    and adding a product +-0.0 (a zero of A times a finite B) changes nothing,
    wherever in the fold it falls. The terms kept are added in the same
    increasing k order.
    """
    if a_transposed:
        bh, k_count, m = a.shape
    else:
        bh, m, k_count = a.shape
    n_panels, pw = bp.shape[1], bp.shape[3]
    c = np.empty((bh, m, n), np.float32)  # (BH, M, N)
    row_blocks = (m + ROW_BLOCK - 1) // ROW_BLOCK
    per_z = row_blocks * n_panels
    for task in prange(bh * per_z):
        # Row blocks vary fastest: a thread's consecutive tasks share one B
        # panel, which then stays in its L2 while rows of A stream past.
        z = task // per_z
        p = (task - z * per_z) // row_blocks
        rb = task - z * per_z - p * row_blocks
        i0, j0 = rb * ROW_BLOCK, p * pw
        iw, jw = min(ROW_BLOCK, m - i0), min(pw, n - j0)
        ablk = np.empty((K_BLOCK, ROW_BLOCK), np.float32)  # (KB, RB)
        acc = np.zeros((ROW_BLOCK, PANEL_COLS), np.float32)  # (RB, PC): the folds start at +0.0
        panel = bp[z, p]  # (K, PW)
        k_lo, k_hi = 0, k_count
        if causal == K_UPTO_ROW:
            k_hi = min(k_count, i0 + iw)
        elif causal == K_FROM_ROW:
            k_lo = min(k_count, i0)
        elif causal == COLS_UPTO_ROW and j0 > i0 + iw - 1:
            k_hi = 0  # every output of this block lies past its row: left at +0.0
        for k0 in range(k_lo, k_hi, K_BLOCK):
            kw = min(K_BLOCK, k_hi - k0)
            _pack_a_block(a, a_transposed, z, i0, iw, k0, kw, ablk)
            _fold_block(ablk, iw, kw, panel, k0, jw, acc)
        for i in range(iw):
            dst = c[z, i0 + i, j0 : j0 + jw]  # (jw,)
            src = acc[i]
            for j in range(jw):
                dst[j] = src[j]
    return c


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


def matmul_batched(
    a: np.ndarray, a_transposed: bool, b: np.ndarray, b_transposed: bool, n: int, causal: int = FULL
) -> np.ndarray:
    """The product of two 3-d operands given in either layout; n is the output's column count.

    A plain B of at most PANEL_COLS columns already is one contiguous panel
    per batch element, so it is used as it is. `causal`: see matmul_packed.
    """
    if not b_transposed and n <= PANEL_COLS:
        bp = b.reshape(b.shape[0], 1, b.shape[1], n)  # (BH, 1, K, N), a view
    else:
        bp = pack_panels(b, b_transposed)  # (BH, NP, K, PC)
    out: np.ndarray = matmul_packed(a, a_transposed, bp, n, causal)  # (BH, M, N)
    return out
