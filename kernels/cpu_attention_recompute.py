"""Causal attention's backward from q, k, v and do alone, p recomputed a block of query rows at a time.

    attention_backward_recomputed(q, k, v, do, fused) -> (dq, dk, dv), each (BH, T, D)

The bits are kernels/cpu_attention.py attention_rows_backward's given the p
that attention_rows makes (the lab's forward keeps none on cpu unless told
to): that backward reads p (B*H*T*T floats) and writes dS as large (a
head's in a thread's buffer, or every head's at once past HEADS_MAX_T);
this one holds neither. The query rows go in blocks, in order, every head
at once, each block in two parallel phases. Rows: a task per (head, panel
of TILE_ROWS rows) runs the forward's own code (cpu_attention.softmax_rows:
the scores' fold over D, the scaling, the causal softmax's trees) into the
block's p rows, then the stored-p backward's query panel (dP = do vᵀ, the
softmax's backward into dS rows, dq = dS k * scale). Keys: a task per
(head, panel of TILE_ROWS keys) folds dv = Pᵀ do and dk = dSᵀ q * scale
over the block's rows i, its tile loaded from the accumulator, folded in
the registers and stored back (cpu_tile.fold_tile_into), so every output
still sees i in increasing order from +0.0, one rounding per step, as the
single fold does (a tile started from a stored +0.0 is a tile started at
+0.0: no bit differs), whatever the block's size. The terms left out are
the same ones: a key panel takes the rows from its own first row (or all
rows where the other operand is not finite), dq the columns up to the
panel's last row (version 2's -0.0 carried through the rest from the dS
rows held). Last, a task per (head, key panel) stores dv and dk.

Memory: a block's p and dS rows for every head (2 x B*H x rows x T floats)
and the heads' accumulators (2 x B*H x T x D), against the stored-p
backward's 2 x B*H*T*T. A block has BLOCK_PANELS panels of rows, or more
where the heads are few, so that a block's row tasks are at least the
threads. The cost is the forward's scores and softmax again.
"""

from __future__ import annotations

import numba
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
BLOCK_PANELS = 8  # query panels a block at least: the dv and dk folds take 96 steps of i per tile load and store


def attention_backward_recomputed(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, fused: bool, block_panels: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv) of the causal attention of q, k, v (BH, T, D) float32 given do: attention_rows_backward's
    bits for attention_rows' own p (its masked entries +0.0), each fold full where a term left out could
    matter (dq's where k is not finite, dv's where do is not, dk's where q is not). `block_panels`: panels of
    rows a block (0: block_size's choice; any gives the same bits). KernelInputError for inputs of the
    wrong dtype or shapes."""
    bh, t, d = validate.check_attention(q, k, v)
    validate.check_pair(q, "q", do, "do")
    full_q, full_v, full_k = (not bool(np.isfinite(x).all()) for x in (k, do, q))  # each fold's
    q, k, v, do = (np.ascontiguousarray(x) for x in (q, k, v, do))
    n_pan = -(-t // TILE_ROWS)
    rows = min(n_pan, block_panels or block_size(bh, numba.get_num_threads())) * TILE_ROWS
    width = n_pan * TILE_ROWS  # whole key panels: their columns of the rows are views
    dq, dk, dv = (np.empty((bh, t, d), F32) for _ in range(3))
    lse = np.empty(bh * t, F32)  # the softmax's log-sum-exp, written and not read
    p_rows, ds_rows = (np.empty((bh, rows, width), F32) for _ in range(2))  # every column written before read
    kc, dc, qc = columns(k), columns(do), columns(q)
    acc_v, acc_k = (np.zeros((bh, width, x.shape[1] * TILE_COLS), F32) for x in (dc, qc))  # dv's, dk's folds
    kernel = _phases_fused if fused else _phases
    operands = (q, do, attention_scale(d), full_q, full_v, full_k, keys(k), keys(v), kc, dc, qc, lse)
    buffers = (p_rows, ds_rows, acc_v, acc_k, dq, dk, dv)
    for b0 in range(0, t, rows):
        for phase in (ROWS, KEYS):
            kernel(phase, b0, min(t, b0 + rows), *operands, *buffers)
    kernel(STORE, 0, t, *operands, *buffers)
    return dq, dk, dv


def block_size(bh: int, threads: int) -> int:
    """Panels of query rows a block: BLOCK_PANELS, or enough that the block's bh * panels row tasks are at
    least the threads."""
    return max(BLOCK_PANELS, -(-threads // bh))


ROWS, KEYS, STORE = 0, 1, 2  # the kernel's phases


# As in kernels/cpu_attention.py: a parallel kernel per version; the tasks call the forward's and the
# stored-p backward's own compiled functions (softmax_rows_v1/_v2, query_panel_v1/_v2).
@njit(parallel=True, cache=True)
def _phases(
    phase,
    b0,
    b1,
    q,
    do,
    scale,
    full_q,
    full_v,
    full_k,
    kp,
    vk,
    kc,
    dc,
    qc,
    lse,
    p_rows,
    ds_rows,
    acc_v,
    acc_k,
    dq,
    dk,
    dv,
):
    """One phase of rows b0 .. b1 - 1 in arithmetic version 1: acc + (a * b) per step of each fold."""
    _phase(
        phase,
        b0,
        b1,
        q,
        do,
        scale,
        full_q,
        full_v,
        full_k,
        kp,
        vk,
        kc,
        dc,
        qc,
        lse,
        p_rows,
        ds_rows,
        acc_v,
        acc_k,
        dq,
        dk,
        dv,
        False,
    )


@njit(parallel=True, cache=True)
def _phases_fused(
    phase,
    b0,
    b1,
    q,
    do,
    scale,
    full_q,
    full_v,
    full_k,
    kp,
    vk,
    kc,
    dc,
    qc,
    lse,
    p_rows,
    ds_rows,
    acc_v,
    acc_k,
    dq,
    dk,
    dv,
):
    """One phase of rows b0 .. b1 - 1 in arithmetic version 2: fma(a, b, acc) per step of each fold."""
    _phase(
        phase,
        b0,
        b1,
        q,
        do,
        scale,
        full_q,
        full_v,
        full_k,
        kp,
        vk,
        kc,
        dc,
        qc,
        lse,
        p_rows,
        ds_rows,
        acc_v,
        acc_k,
        dq,
        dk,
        dv,
        True,
    )


@njit(inline="always")
def _phase(
    phase,
    b0,
    b1,
    q,
    do,
    scale,
    full_q,
    full_v,
    full_k,
    kp,
    vk,
    kc,
    dc,
    qc,
    lse,
    p_rows,
    ds_rows,
    acc_v,
    acc_k,
    dq,
    dk,
    dv,
    fused,
):
    bh, t_count = q.shape[0], q.shape[1]
    if phase == ROWS:  # a task per (head, panel of the block's rows): p rows, dS rows, dq
        softmax = of_version(fused, softmax_rows_v1, softmax_rows_v2)
        query_panel = of_version(fused, query_panel_v1, query_panel_v2)
        n_rows = (b1 - b0 + TILE_ROWS - 1) // TILE_ROWS
        for task in prange(bh * n_rows):
            z = np.int64(task // n_rows)
            r = np.int64(task % n_rows) * TILE_ROWS
            i0 = b0 + r
            n = min(t_count, i0 + TILE_ROWS) - i0
            softmax(q, z, i0, scale, kp, p_rows[z, r : r + n], lse)  # the forward's own rows of p
            query_panel(do, p_rows[z, r : r + n], ds_rows[z, r : r + n], z, i0, scale, full_q, vk, kc, dq)
    elif phase == KEYS:  # a task per (head, key panel the block's rows reach): dv and dk folded over them
        n_keys = p_rows.shape[2] // TILE_ROWS if full_v or full_k else (b1 + TILE_ROWS - 1) // TILE_ROWS
        for task in prange(bh * n_keys):
            z = np.int64(task // n_keys)
            j0 = np.int64(task % n_keys) * TILE_ROWS
            lo = b0 if full_v else max(b0, j0)
            if lo < b1:
                _fold_rows(p_rows[z, lo - b0 : b1 - b0, j0 : j0 + TILE_ROWS], dc[z], lo, b1, acc_v[z], j0, fused)
            lo = b0 if full_k else max(b0, j0)
            if lo < b1:
                _fold_rows(ds_rows[z, lo - b0 : b1 - b0, j0 : j0 + TILE_ROWS], qc[z], lo, b1, acc_k[z], j0, fused)
    else:  # a task per (head, key panel): dv and dk stored (k_end = T: nothing left out at the end, no carry)
        n_keys = (t_count + TILE_ROWS - 1) // TILE_ROWS
        for task in prange(bh * n_keys):
            z = np.int64(task // n_keys)
            j0 = np.int64(task % n_keys) * TILE_ROWS
            store_rows(acc_v[z, j0:], z, j0, dv, scale, False, acc_v[z], dc[z], t_count, fused)
            store_rows(acc_k[z, j0:], z, j0, dk, scale, True, acc_k[z], qc[z], t_count, fused)


@njit(inline="always")
def _fold_rows(apanel, panels, i_lo, i_hi, acc, j0, fused):
    """acc[j0 : j0 + TILE_ROWS, :] += apanel (i_hi - i_lo, TILE_ROWS: rows i_lo .. i_hi - 1, k-major) times
    panels[:, i_lo:i_hi] (G, T, TC), i in increasing order, each tile started from acc and stored back."""
    for g in range(panels.shape[0]):
        c = g * TILE_COLS
        fold_tile_into(apanel, panels[g, i_lo:], acc, j0, c, acc, j0, c, 0, i_hi - i_lo, fused, False)
