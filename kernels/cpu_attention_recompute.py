"""Causal attention's backward from q, k, v and do alone, p recomputed a block of query rows at a time.

    attention_backward_recomputed(q, k, v, do, fused) -> (dq, dk, dv), each (BH, T, D)

The bits are kernels/cpu_attention.py attention_rows_backward's given the p
that attention_rows makes (the lab's forward keeps none where its cache is
full, or at long contexts): that backward reads p (B*H*T*T floats) and
writes dS as large (a head's in a thread's buffer, or every head's at once
past HEADS_MAX_T); this one holds neither. A task is one head. Its query
rows go in blocks of BLOCK_ROWS, in order: for each panel of TILE_ROWS rows
the forward's own code (cpu_attention.softmax_rows: the scores' fold over
D, the scaling, the causal softmax's trees) writes the p rows into the
task's buffer, then dP = do vᵀ, the softmax's backward into dS rows and dq
= dS k * scale, each as the stored-p backward folds them. dv = Pᵀ do and dk
= dSᵀ q * scale fold over the query rows i, which arrive a block at a time:
each key panel's outputs are accumulated in the registers over the
block's rows (the micro-kernel started from the accumulator,
cpu_tile.fold_tile_into) and stored back, so every output still sees i in
increasing order from +0.0, one rounding per step, as the single fold does
(a tile started from stored +0.0 is a tile started at +0.0: no bit
differs). The terms left out are the same ones: a key panel takes the rows
from its own first row (or all rows where the other operand is not finite),
dq the columns up to the panel's last row (with version 2's -0.0 carried
through the rest, from the dS rows the task holds).

Memory: a task's two blocks of rows (2 x BLOCK_ROWS x T floats) and its
head's accumulators (2 x T x D), against the stored-p backward's 2 x B*H*T*T
(p and dS). The cost is the forward's scores and softmax again, one head per
thread (B*H heads must keep the threads busy).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels import validate
from kernels.cpu_attention import (
    attention_scale,
    columns,
    keys,
    of_version,
    query_panel_v1,
    query_panel_v2,
    softmax_rows_v1,
    softmax_rows_v2,
    store_rows,
)
from kernels.cpu_tile import TILE_COLS, TILE_ROWS, fold_tile_into

F32 = np.float32
BLOCK_PANELS = 8  # query panels a block: the dv and dk folds take BLOCK_ROWS steps of i per tile load and store
BLOCK_ROWS = BLOCK_PANELS * TILE_ROWS


def attention_backward_recomputed(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, fused: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv) of the causal attention of q, k, v (BH, T, D) float32 given do: attention_rows_backward's
    bits for attention_rows' own p (its masked entries +0.0), each fold full where a term left out could
    matter (dq's where k is not finite, dv's where do is not, dk's where q is not). KernelInputError for
    inputs of the wrong dtype or shapes."""
    bh, t, d = validate.check_attention(q, k, v)
    validate.check_pair(q, "q", do, "do")
    full_q, full_v, full_k = (not bool(np.isfinite(x).all()) for x in (k, do, q))  # each fold's
    q, k, v, do = (np.ascontiguousarray(x) for x in (q, k, v, do))
    dq, dk, dv = (np.empty((bh, t, d), F32) for _ in range(3))
    lse = np.empty(bh * t, F32)  # the softmax's log-sum-exp, written and not read
    panels = (keys(k), keys(v), columns(k), columns(do), columns(q))
    kernel = _backward_recomputed_fused if fused else _backward_recomputed
    kernel(q, do, attention_scale(d), full_q, full_v, full_k, *panels, lse, dq, dk, dv)
    return dq, dk, dv


# As in kernels/cpu_attention.py: a parallel kernel per version, the task a function compiled on its own.
@njit(parallel=True, cache=True)
def _backward_recomputed(q, do, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv):
    """A task per head in arithmetic version 1: acc + (a * b) per step of each fold."""
    _heads(q, do, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv, False)


@njit(parallel=True, cache=True)
def _backward_recomputed_fused(q, do, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv):
    """A task per head in arithmetic version 2: fma(a, b, acc) per step of each fold."""
    _heads(q, do, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv, True)


@njit(inline="always")
def _heads(q, do, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv, fused):
    head = of_version(fused, _head_v1, _head_v2)
    for z in prange(q.shape[0]):
        head(q, do, np.int64(z), scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv)


@njit(cache=True)
def _head_v1(q, do, z, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv):
    """_head in arithmetic version 1."""
    _head(q, do, z, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv, False)


@njit(cache=True)
def _head_v2(q, do, z, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv):
    """_head in arithmetic version 2."""
    _head(q, do, z, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv, True)


@njit(inline="always")
def _head(q, do, z, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse, dq, dk, dv, fused):
    """Batch element z's dq, dk and dv, its query rows a block at a time (see the module docstring)."""
    t_count = q.shape[1]
    softmax = of_version(fused, softmax_rows_v1, softmax_rows_v2)
    query_panel = of_version(fused, query_panel_v1, query_panel_v2)
    width = (t_count + TILE_ROWS - 1) // TILE_ROWS * TILE_ROWS  # whole key panels: their columns are views
    p_rows = np.zeros((BLOCK_ROWS, width), F32)
    ds_rows = np.zeros((BLOCK_ROWS, width), F32)
    acc_v = np.zeros((width, dc.shape[1] * TILE_COLS), F32)  # dv's and dk's folds so far, +0.0 at first
    acc_k = np.zeros((width, qc.shape[1] * TILE_COLS), F32)
    for b0 in range(0, t_count, BLOCK_ROWS):
        b1 = min(t_count, b0 + BLOCK_ROWS)
        for i0 in range(b0, b1, TILE_ROWS):
            i1 = min(t_count, i0 + TILE_ROWS)
            r = i0 - b0
            softmax(q, z, i0, scale, kp, p_rows[r : r + i1 - i0], lse)  # the forward's own rows of p
            query_panel(do, p_rows[r : r + i1 - i0], ds_rows[r : r + i1 - i0], z, i0, scale, full_q, vk, kc, dq)
        for j0 in range(0, width, TILE_ROWS):  # every key panel the block's rows reach, i >= its first row
            lo = b0 if full_v else max(b0, j0)
            if lo < b1:
                _fold_rows(p_rows[lo - b0 : b1 - b0, j0 : j0 + TILE_ROWS], dc[z], lo, b1, acc_v, j0, fused)
            lo = b0 if full_k else max(b0, j0)
            if lo < b1:
                _fold_rows(ds_rows[lo - b0 : b1 - b0, j0 : j0 + TILE_ROWS], qc[z], lo, b1, acc_k, j0, fused)
    for j0 in range(0, t_count, TILE_ROWS):  # k_end = T: nothing left out at the end, nothing to carry
        store_rows(acc_v[j0:], z, j0, dv, scale, False, acc_v, dc[z], t_count, fused)
        store_rows(acc_k[j0:], z, j0, dk, scale, True, acc_k, qc[z], t_count, fused)


@njit(inline="always")
def _fold_rows(apanel, panels, i_lo, i_hi, acc, j0, fused):
    """acc[j0 : j0 + TILE_ROWS, :] += apanel (i_hi - i_lo, TILE_ROWS: rows i_lo .. i_hi - 1, k-major) times
    panels[:, i_lo:i_hi] (G, T, TC), i in increasing order, each tile started from acc and stored back."""
    for g in range(panels.shape[0]):
        c = g * TILE_COLS
        fold_tile_into(apanel, panels[g, i_lo:], acc, j0, c, acc, j0, c, 0, i_hi - i_lo, fused, False)
