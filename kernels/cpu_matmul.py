"""Matrix products of the `cpu` backend (docs/arithmetic.md 2.3), batched or not.

c[i, j] = left fold over k = 0..K-1 of a[i, k] * b[k, j], starting from +0.0.
Only the k order is pinned, so the kernel is free to choose everything else:

- B is packed into column panels of PANEL_COLS columns, each panel a
  contiguous (K, PANEL_COLS) block, so the inner loop streams unit-stride
  memory whatever B's layout (b or bᵀ) and no panel row lands on the same
  cache set as the next (a row stride of 4 KiB would).
- A task is ROW_BLOCK rows of one batch element; its rows of A are packed
  (transposing them when A is given as aᵀ) and prange spreads tasks over the
  threads. Rows are independent outputs.
- For each panel the task keeps a (ROW_BLOCK, PANEL_COLS) block of
  accumulators in a small buffer that stays in L1, and runs k as the OUTER
  loop: for each k every accumulator gets exactly one `acc + a[i, k] * b[k, j]`
  (a multiply rounded, then an add rounded: numba contracts nothing without
  fastmath), so every output keeps its left-to-right fold. The j loop is the
  innermost loop and LLVM vectorises it into vmulps/vaddps on zmm registers.

These sizes change speed only, never a bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels.cpu_scalar import ZERO

PANEL_COLS = 128  # columns of a packed B panel (512 bytes per panel row)
ROW_BLOCK = 8  # rows of C per task; each B panel row is loaded once from L2 per task


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
def _pack_rows(a, a_transposed, z, i0, iw, ablk):
    """Copy rows i0..i0+iw of A (batch z) into ablk (ROW_BLOCK, K); a is aᵀ if a_transposed."""
    k_count = ablk.shape[1]
    if a_transposed:
        for k in range(k_count):
            src = a[z, k]  # (M,)
            for i in range(iw):
                ablk[i, k] = src[i0 + i]
    else:
        for i in range(iw):
            src = a[z, i0 + i]  # (K,)
            for k in range(k_count):
                ablk[i, k] = src[k]


@njit(inline="always")
def _fold_panel(ablk, iw, panel, jw, acc):
    """acc[i, j] = fold over k of ablk[i, k] * panel[k, j], from +0.0, for i < iw, j < jw."""
    k_count = ablk.shape[1]
    for i in range(iw):
        row = acc[i]
        for j in range(jw):
            row[j] = ZERO
    for k in range(k_count):  # k outermost: each accumulator sees k = 0, 1, 2, ... in order
        brow = panel[k]  # (PC,) contiguous
        for i in range(iw):
            aik = ablk[i, k]
            row = acc[i]  # (PC,) contiguous, in L1
            for j in range(jw):
                row[j] = row[j] + aik * brow[j]


@njit(parallel=True, cache=True)
def matmul_packed(a, a_transposed, bp, n):
    """C (BH, M, N) from A (BH, M, K) (or aᵀ given as (BH, K, M)) and panels bp from pack_panels."""
    if a_transposed:
        bh, k_count, m = a.shape
    else:
        bh, m, k_count = a.shape
    n_panels = bp.shape[1]
    c = np.empty((bh, m, n), np.float32)  # (BH, M, N)
    row_blocks = (m + ROW_BLOCK - 1) // ROW_BLOCK
    for task in prange(bh * row_blocks):
        z = task // row_blocks
        i0 = (task - z * row_blocks) * ROW_BLOCK
        iw = min(ROW_BLOCK, m - i0)
        ablk = np.empty((ROW_BLOCK, k_count), np.float32)  # (RB, K)
        acc = np.empty((ROW_BLOCK, PANEL_COLS), np.float32)  # (RB, PC)
        _pack_rows(a, a_transposed, z, i0, iw, ablk)
        for p in range(n_panels):
            j0 = p * PANEL_COLS
            jw = min(PANEL_COLS, n - j0)
            _fold_panel(ablk, iw, bp[z, p], jw, acc)
            for i in range(iw):
                dst = c[z, i0 + i]  # (N,)
                for j in range(jw):
                    dst[j0 + j] = acc[i, j]
    return c


def matmul_batched(a: np.ndarray, a_transposed: bool, b: np.ndarray, b_transposed: bool, n: int) -> np.ndarray:
    """The product of two 3-d operands given in either layout; n is the output's column count."""
    bp = pack_panels(b, b_transposed)  # (BH, NP, K, PC)
    return matmul_packed(a, a_transposed, bp, n)
