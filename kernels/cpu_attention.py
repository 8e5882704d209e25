"""Causal attention's forward pass in one kernel of the `cpu` backend: scores, softmax and P V a row panel at a time.

    attention_rows(q, k, v, full, fused) -> (o (BH, T, D), p (BH, T, T), lse (BH*T,))

The bits are those of the composition that kernels/cpu.py `attention` wrote
as three passes (docs/arithmetic.md 4.4): S = q kᵀ by the matmul's fold
(kernels/cpu_matmul.py: per output one fold over k = 0..D-1 from +0.0,
version 1 or 2), S * scale rounded once, the causal softmax of each row
(cpu_nn.causal_softmax_row: its halving trees, exp and division), then O =
P V folded over j in increasing order. Here a task is one panel of
TILE_ROWS query rows of one batch element: its scores go through the
register micro-kernel (cpu_tile.fold_tile_into) into a buffer that stays in
L1/L2, only the columns up to the panel's last row (the rest is never read),
are scaled and soft-maxed row by row into p, and the panel's P rows, packed
k-major on the way, fold against V's panels at once. The three passes wrote
S to memory, read it twice and packed P again: at 12 heads of T = 1,024 the
forward took 34 ms against torch's 10.

The terms left out are those cpu_matmul's causal modes leave out, with the
same preconditions: P's masked entries are +0.0, so where every v is finite
(`full` False) a panel folds j < its last row + 1 only, and in version 2 an
output that ends -0.0 is carried through the rest in order (+0.0 times a v
of either sign can turn -0.0 into +0.0); with a non-finite v (`full` True)
every j is folded. K is packed once into panels of TILE_COLS keys (D,
TILE_COLS) and V into panels of TILE_COLS columns (T, TILE_COLS), +0.0 past
T and D. Panels are handed out zigzag (first, last, second, ...): a thread's
contiguous run of tasks holds cheap and dear rows alike.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels import constants as K
from kernels.cpu_nn import causal_softmax_row
from kernels.cpu_scalar import bits_from_f32, log_f32, mac_f32, next_pow2
from kernels.cpu_tile import TILE_COLS, TILE_ROWS, fold_tile_into

NEG_ZERO_BITS = -(2**31)  # -0.0 as an int32
F32 = np.float32


def attention_scale(d: int) -> np.float32:
    """1 / sqrt(float32(D)), each operation rounded to float32 on the host."""
    scale: np.float32 = K.ONE / np.sqrt(F32(d))
    return scale


def attention_rows(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, full: bool, fused: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(o (BH, T, D), p (BH, T, T), lse (BH*T,)) from q, k, v (BH, T, D) float32; see the module docstring.

    `full`: fold every j of P V (some v is not finite). Precondition: kernels/validate.check_attention."""
    bh, t, d = q.shape
    q, k, v = (np.ascontiguousarray(x) for x in (q, k, v))
    o = np.empty((bh, t, d), F32)
    p = np.empty((bh, t, t), F32)  # numpy's allocation: huge pages for a head-sized array
    lse = np.empty(bh * t, F32)
    kp = np.empty((bh, -(-t // TILE_COLS), d, TILE_COLS), F32)  # K's panels of keys
    vp = np.empty((bh, -(-d // TILE_COLS), t, TILE_COLS), F32)  # V's panels of columns
    (_attention_rows_fused if fused else _attention_rows)(q, k, v, attention_scale(d), full, o, p, lse, kp, vp)
    return o, p, lse


@njit(parallel=True, cache=True)
def _attention_rows(q, k, v, scale, full, o, p, lse, kp, vp):
    """_rows in arithmetic version 1: acc + (a * b) per step of each fold."""
    _rows(q, k, v, scale, full, o, p, lse, kp, vp, False)


@njit(parallel=True, cache=True)
def _attention_rows_fused(q, k, v, scale, full, o, p, lse, kp, vp):
    """_rows in arithmetic version 2: fma(a, b, acc) per step of each fold."""
    _rows(q, k, v, scale, full, o, p, lse, kp, vp, True)


@njit(inline="always")
def _rows(q, k, v, scale, full, o, p, lse, kp, vp, fused):
    """Pack K and V, then every (batch element, row panel) task: scores, softmax, P V; outputs o, p, lse."""
    bh, t_count, d = q.shape
    nq, nd = kp.shape[1], vp.shape[1]
    for task in prange(bh * nq):  # kp[z, g, kk, c] = k[z, g * TC + c, kk]
        z, g = task // nq, task % nq
        for c in range(TILE_COLS):
            j = g * TILE_COLS + c
            for kk in range(d):
                kp[z, g, kk, c] = k[z, j, kk] if j < t_count else F32(0.0)
    for task in prange(bh * nd):  # vp[z, g, j, c] = v[z, j, g * TC + c]
        z, g = task // nd, task % nd
        for j in range(t_count):
            for c in range(TILE_COLS):
                col = g * TILE_COLS + c
                vp[z, g, j, c] = v[z, j, col] if col < d else F32(0.0)
    n_pan = (t_count + TILE_ROWS - 1) // TILE_ROWS
    for task in prange(bh * n_pan):
        z = task // n_pan
        r = task - z * n_pan
        panel = r // 2 if r % 2 == 0 else n_pan - 1 - r // 2  # zigzag: 0, last, 1, last - 1, ...
        _panel(q, z, panel * TILE_ROWS, scale, full, o, p, lse, kp, vp, fused)


@njit(inline="always")
def _panel(q, z, i0, scale, full, o, p, lse, kp, vp, fused):
    """Rows i0 .. i0 + TILE_ROWS - 1 (those below T) of batch element z: their scores, softmax and P V."""
    t_count, d = q.shape[1], q.shape[2]
    i1 = min(t_count, i0 + TILE_ROWS)
    qa = np.empty((d, TILE_ROWS), F32)  # the panel's q rows, k-major (+0.0 past T)
    for i in range(TILE_ROWS):
        for kk in range(d):
            qa[kk, i] = q[z, i0 + i, kk] if i0 + i < t_count else F32(0.0)
    n_cols = (i1 + TILE_COLS - 1) // TILE_COLS  # key panels holding the columns j < i1
    s = np.empty((TILE_ROWS, n_cols * TILE_COLS), F32)  # (TR, columns up to the panel's last row)
    for g in range(n_cols):
        fold_tile_into(qa, kp[z, g], s, 0, 0, s, 0, g * TILE_COLS, 0, d, fused, True)
    k_end = t_count if full else i1  # the j of P V the panel folds
    pa = np.empty((k_end, TILE_ROWS), F32)  # the panel's P rows, k-major (+0.0 past T)
    buf = np.empty(next_pow2(t_count), F32)  # the softmax's halving trees
    for i in range(TILE_ROWS):
        t = i0 + i
        if t < t_count:
            row = s[i]
            for j in range(t + 1):
                row[j] = row[j] * scale
            m, total = causal_softmax_row(row, p[z, t], buf, t)
            lse[z * t_count + t] = m + log_f32(total)
            prow = p[z, t]
            for j in range(k_end):
                pa[j, i] = prow[j]
        else:
            for j in range(k_end):
                pa[j, i] = F32(0.0)
    out = np.empty((TILE_ROWS, vp.shape[1] * TILE_COLS), F32)
    for g in range(vp.shape[1]):
        fold_tile_into(pa, vp[z, g], out, 0, 0, out, 0, g * TILE_COLS, 0, k_end, fused, True)
    for i in range(i1 - i0):
        for c in range(d):
            x = out[i, c]
            if fused and k_end < t_count and bits_from_f32(x) == NEG_ZERO_BITS:
                for j in range(k_end, t_count):  # the masked terms, in order: +0.0 * v may end a -0.0
                    x = mac_f32(x, p[z, i0 + i, j], vp[z, c // TILE_COLS, j, c % TILE_COLS], True)
            o[z, i0 + i, c] = x
