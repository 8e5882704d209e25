"""Matrix products of the `cpu` backend (docs/arithmetic.md 2.3), batched or not.

c[i, j] = left fold over k = 0..K-1 of a[i, k] * b[k, j], starting from +0.0:
`acc + (a * b)` per k in arithmetic version 1 (matmul_packed), `fma(a, b, acc)`
in version 2 (matmul_packed_fused); one source, two compiled kernels, since
`fused` is a literal each entry point hands down to kernels/cpu_tile.py and
kernels/cpu_scalar.mac_f32. Only the k order is pinned, so the kernel is free
to choose everything else:

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
  once (version 2: 16 vfmadd231ps instead of the vmulps and vaddps). The
  edges of the block use a vectorised loop with the accumulators in L1.
  Either way each output gets exactly one fold step per k, k increasing,
  from +0.0: the left fold of the document.

"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels.cpu_scalar import bits_from_f32, mac_f32
from kernels.cpu_tile import TILE_COLS, TILE_ROWS, fold_tile

PANEL_COLS = 128  # columns of a packed B panel (512 bytes per panel row)
ROW_BLOCK = 32  # rows of C per task: each B panel row fetched from L2 serves 32 rows from L1
NEG_ZERO_BITS = -(2**31)  # -0.0 as an int32
# k values of A packed at a time. 64, not 128: a tile's panel strip is K_BLOCK rows of 128 bytes 512 bytes
# apart, which fall in 16 of the 64 sets of a 48 KiB 12-way L1 (Intel), so 128 rows (16 lines a set) could
# not stay in L1 and came from L2 for every row tile; 64 rows (8 a set) do. Measured (docs/benchmarks.md):
# 1.13x-1.56x single-threaded on an Intel Xeon, the same bits.
K_BLOCK = 64


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
def _fold_region(ablk, i_lo, i_hi, kw, panel, k0, j_lo, j_hi, acc, fused):
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
                row[j] = mac_f32(row[j], aik, brow[j], fused)


@njit(inline="always")
def _fold_block(ablk, iw, kw, panel, k0, jw, acc, fused):
    """acc[i, j] += fold over kk < kw of ablk[kk, i] * panel[k0 + kk, j], for i < iw, j < jw.

    Whole TILE_ROWS x TILE_COLS tiles go through the register micro-kernel;
    the right and bottom edges through _fold_region. Every output is touched
    by exactly one of them, with k in the same increasing order.
    """
    iw_t = iw - iw % TILE_ROWS
    jw_t = jw - jw % TILE_COLS
    for j0 in range(0, jw_t, TILE_COLS):
        for i0 in range(0, iw_t, TILE_ROWS):
            fold_tile(ablk, panel, acc, i0, j0, k0, kw, fused)
    if jw_t < jw:
        _fold_region(ablk, 0, iw_t, kw, panel, k0, jw_t, jw, acc, fused)
    if iw_t < iw:
        _fold_region(ablk, iw_t, iw, kw, panel, k0, 0, jw, acc, fused)


# What a causal attention product may leave out (`causal` of matmul_packed). Each is exact only under
# the caller's preconditions (kernels/cpu.py checks them, else asks for FULL):
FULL = 0  # every k of every output
K_UPTO_ROW = 1  # row block [i0, i0 + iw) folds k < i0 + iw only: A[i, k] is +-0 for k > i, B finite
K_FROM_ROW = 2  # row block [i0, i0 + iw) folds k >= i0 only: A[i, k] is +-0 for k < i, B finite
COLS_UPTO_ROW = 3  # column panels starting past the block's last row are not computed (set to +0.0)


@njit(parallel=True, cache=True)
def matmul_packed(a, a_transposed, bp, n, causal):
    """_matmul_packed in arithmetic version 1: acc + (a * b) per k."""
    return _matmul_packed(a, a_transposed, bp, n, causal, False)


@njit(parallel=True, cache=True)
def matmul_packed_fused(a, a_transposed, bp, n, causal):
    """_matmul_packed in arithmetic version 2: fma(a, b, acc) per k."""
    return _matmul_packed(a, a_transposed, bp, n, causal, True)


@njit(inline="always")
def _matmul_packed(a, a_transposed, bp, n, causal, fused):
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

    Version 2 (fused) differs in one place: fma(a, b, +0.0) of a negative
    product too small for float32 rounds to -0.0, so an accumulator can be
    -0.0 there, and a later term +0.0 (a masked +-0.0 times a finite b of the
    same sign) would turn it into +0.0. Leading terms are still safe to leave
    out (the accumulator is +0.0 until the first one kept), trailing ones
    (K_UPTO_ROW) are not: an accumulator that ends -0.0 is carried through the
    terms left out, in order (_finish_negative_zeros); they are rare.
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
            _fold_block(ablk, iw, kw, panel, k0, jw, acc, fused)
        if fused and causal == K_UPTO_ROW and k_hi < k_count:
            _finish_negative_zeros(a, a_transposed, z, i0, iw, panel, k_hi, k_count, jw, acc)
        for i in range(iw):
            dst = c[z, i0 + i, j0 : j0 + jw]  # (jw,)
            src = acc[i]
            for j in range(jw):
                dst[j] = src[j]
    return c


@njit(inline="always")
def _finish_negative_zeros(a, a_transposed, z, i0, iw, panel, k_lo, k_hi, jw, acc):
    """Version 2: fold the terms k in [k_lo, k_hi) into every accumulator of the block that is -0.0.

    Every other accumulator is left as it is: those terms are +-0.0 (the
    caller's precondition), and fma(+-0.0, b, acc) is acc unless acc is -0.0.
    """
    for i in range(iw):
        for j in range(jw):
            if bits_from_f32(acc[i, j]) == NEG_ZERO_BITS:
                x = acc[i, j]
                for k in range(k_lo, k_hi):
                    aik = a[z, k, i0 + i] if a_transposed else a[z, i0 + i, k]
                    x = mac_f32(x, aik, panel[k, j], True)
                acc[i, j] = x


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
    a: np.ndarray,
    a_transposed: bool,
    b: np.ndarray,
    b_transposed: bool,
    n: int,
    causal: int = FULL,
    fused: bool = False,
) -> np.ndarray:
    """The product of two 3-d operands given in either layout; n is the output's column count.

    A plain B of at most PANEL_COLS columns already is one contiguous panel
    per batch element, so it is used as it is. `causal`: see _matmul_packed.
    `fused`: arithmetic version 2's fold (fma) instead of version 1's.
    """
    if not b_transposed and n <= PANEL_COLS:
        bp = b.reshape(b.shape[0], 1, b.shape[1], n)  # (BH, 1, K, N), a view
    else:
        bp = pack_panels(b, b_transposed)  # (BH, NP, K, PC)
    kernel = matmul_packed_fused if fused else matmul_packed
    out: np.ndarray = kernel(a, a_transposed, bp, n, causal)  # (BH, M, N)
    return out
