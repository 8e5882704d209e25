"""Causal attention's backward from q, k, v and do alone, p recomputed a block of query rows at a time.

    attention_backward_recomputed(q, k, v, do, fused) -> (dq, dk, dv), each (BH, T, D)

The bits are kernels/cpu_attention.py attention_rows_backward's given the p
that attention_rows makes (the lab's forward keeps none on cpu unless told
to): that backward reads p (B*H*T*T floats) and writes dS as large (a
head's in a thread's buffer, or every head's at once past HEADS_MAX_T);
this one holds neither. The query rows go in blocks, in order. For a
panel of TILE_ROWS rows the forward's own code (cpu_attention.softmax_rows:
the scores' fold over D, the scaling, the causal softmax's trees) writes
its p rows, then the stored-p backward's query panel makes dP = do vᵀ, the
softmax's backward into dS rows, and dq = dS k * scale. For a panel of
TILE_ROWS keys, dv = Pᵀ do and dk = dSᵀ q * scale fold over the block's rows
i, the register tile loaded from an accumulator, folded and stored back
(cpu_tile.fold_tile_into), so every output still sees i in increasing order
from +0.0, one rounding per step, as the single fold does (a tile started
from a stored +0.0 is a tile started at +0.0: no bit differs), whatever the
block's size. The terms left out are the same ones: a key panel takes the
rows from its own first row (or all rows where the other operand is not
finite), dq the columns up to the panel's last row (version 2's -0.0
carried through the rest from the dS rows held).

Two ways to share the work among the threads, the same bits. Where the
heads keep the threads evenly busy (as cpu_attention.by_heads asks) a task
is a head: its blocks of BLOCK_PANELS panels of rows, its own buffers, in
cache between a block's rows and its keys. Elsewhere (fewer heads) every
head goes at once, each block in two parallel phases (a task per head and
panel of rows, then per head and panel of keys), a block large enough that
its row tasks are at least the threads; then the dv and dk are stored, a
task per head and key panel. At T = 4,096 with 8 heads on 2 threads the
head tasks took 0.116 s and the phases 0.152-0.178 s (the blocks of every
head do not stay in cache), the stored-p backward 0.117 s.

Memory: a task's (or a block's, for every head) p and dS rows and the
heads' accumulators (2 x T x D a head), against the stored-p backward's
2 x B*H*T*T. The cost is the forward's scores and softmax again.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from kernels import validate
from kernels.cpu_attention import (
    attention_scale,
    columns,
    heads_keep_threads_busy,
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
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    do: np.ndarray,
    fused: bool,
    by_heads: bool | None = None,
    block_panels: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv) of the causal attention of q, k, v (BH, T, D) float32 given do: attention_rows_backward's
    bits for attention_rows' own p (its masked entries +0.0), each fold full where a term left out could
    matter (dq's where k is not finite, dv's where do is not, dk's where q is not). `by_heads` (None: where
    the heads keep the threads busy) and `block_panels` (panels of rows a block of the phases; 0:
    block_size's choice) change no bit. KernelInputError for inputs of the wrong dtype or shapes."""
    bh, t, d = validate.check_attention(q, k, v)
    validate.check_pair(q, "q", do, "do")
    full_q, full_v, full_k = (not bool(np.isfinite(x).all()) for x in (k, do, q))  # each fold's
    q, k, v, do = (np.ascontiguousarray(x) for x in (q, k, v, do))
    threads = numba.get_num_threads()
    heads = heads_keep_threads_busy(bh, threads) if by_heads is None else by_heads
    n_pan = -(-t // TILE_ROWS)
    rows = min(n_pan, block_panels or block_size(bh, threads)) * TILE_ROWS
    width = n_pan * TILE_ROWS  # whole key panels: their columns of the rows are views
    dq, dk, dv = (np.empty((bh, t, d), F32) for _ in range(3))
    lse = np.empty(bh * t, F32)  # the softmax's log-sum-exp, written and not read
    kc, dc, qc = columns(k), columns(do), columns(q)
    if heads:  # each task its own rows and accumulators
        p_rows, ds_rows, acc_v, acc_k = (np.empty((1, 1, 1), F32) for _ in range(4))
    else:  # every column written before read
        p_rows, ds_rows = (np.empty((bh, rows, width), F32) for _ in range(2))
        acc_v, acc_k = (np.zeros((bh, width, x.shape[1] * TILE_COLS), F32) for x in (dc, qc))  # dv's, dk's folds
    kernel = _phases_fused if fused else _phases
    operands = (q, do, attention_scale(d), full_q, full_v, full_k, keys(k), keys(v), kc, dc, qc, lse)
    buffers = (p_rows, ds_rows, acc_v, acc_k, dq, dk, dv)
    if heads:
        kernel(HEADS, 0, t, operands, buffers)
        return dq, dk, dv
    for b0 in range(0, t, rows):
        for phase in (ROWS, KEYS):
            kernel(phase, b0, min(t, b0 + rows), operands, buffers)
    kernel(STORE, 0, t, operands, buffers)
    return dq, dk, dv


def block_size(bh: int, threads: int) -> int:
    """Panels of query rows a block of the phases: BLOCK_PANELS, or enough that the block's bh * panels row
    tasks are at least the threads."""
    return max(BLOCK_PANELS, -(-threads // bh))


HEADS, ROWS, KEYS, STORE = 0, 1, 2, 3  # the kernel's ways: a task a head; the phases of a block, the store


# As in kernels/cpu_attention.py: a parallel kernel per version; the tasks call the forward's and the
# stored-p backward's own compiled functions (softmax_rows_v1/_v2, query_panel_v1/_v2) and key_fold_v1/_v2.
# operands: (q, do, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse); buffers: (p_rows, ds_rows,
# acc_v, acc_k, dq, dk, dv).
@njit(parallel=True, cache=True)
def _phases(phase, b0, b1, operands, buffers):
    """The heads, or one phase of rows b0 .. b1 - 1, in arithmetic version 1: acc + (a * b) per fold step."""
    _phase(phase, b0, b1, operands, buffers, False)


@njit(parallel=True, cache=True)
def _phases_fused(phase, b0, b1, operands, buffers):
    """The heads, or one phase of rows b0 .. b1 - 1, in arithmetic version 2: fma(a, b, acc) per fold step."""
    _phase(phase, b0, b1, operands, buffers, True)


@njit(inline="always")
def _phase(phase, b0, b1, operands, buffers, fused):
    q, do, scale, full_q, full_v, full_k, kp, vk, kc, dc, qc, lse = operands
    p_rows, ds_rows, acc_v, acc_k, dq, dk, dv = buffers
    bh, t_count = q.shape[0], q.shape[1]
    softmax = of_version(fused, softmax_rows_v1, softmax_rows_v2)
    query_panel = of_version(fused, query_panel_v1, query_panel_v2)
    key_fold = of_version(fused, key_fold_v1, key_fold_v2)
    if phase == HEADS:  # a task per head: its blocks, its own buffers
        width = (t_count + TILE_ROWS - 1) // TILE_ROWS * TILE_ROWS
        rows = BLOCK_PANELS * TILE_ROWS
        for head in prange(bh):
            z = np.int64(head)
            p_z, ds_z = np.empty((rows, width), F32), np.empty((rows, width), F32)
            av, ak = np.zeros((width, dc.shape[1] * TILE_COLS), F32), np.zeros((width, qc.shape[1] * TILE_COLS), F32)
            for c0 in range(0, t_count, rows):
                c1 = min(t_count, c0 + rows)
                for r in range(0, c1 - c0, TILE_ROWS):
                    n = min(t_count, c0 + r + TILE_ROWS) - c0 - r
                    softmax(q, z, c0 + r, scale, kp, p_z[r : r + n], lse)  # the forward's own rows of p
                    query_panel(do, p_z[r : r + n], ds_z[r : r + n], z, c0 + r, scale, full_q, vk, kc, dq)
                for j0 in range(0, width, TILE_ROWS):
                    key_fold(p_z, ds_z, z, j0, c0, c1, full_v, full_k, dc, qc, av, ak)
            for j0 in range(0, t_count, TILE_ROWS):
                _store_keys(av, ak, z, j0, scale, dc, qc, dk, dv, fused)
    elif phase == ROWS:  # a task per (head, panel of the block's rows): p rows, dS rows, dq
        n_rows = (b1 - b0 + TILE_ROWS - 1) // TILE_ROWS
        for task in prange(bh * n_rows):
            z = np.int64(task // n_rows)
            r = np.int64(task % n_rows) * TILE_ROWS
            n = min(t_count, b0 + r + TILE_ROWS) - b0 - r
            softmax(q, z, b0 + r, scale, kp, p_rows[z, r : r + n], lse)
            query_panel(do, p_rows[z, r : r + n], ds_rows[z, r : r + n], z, b0 + r, scale, full_q, vk, kc, dq)
    elif phase == KEYS:  # a task per (head, key panel the block's rows reach): dv and dk folded over them
        n_keys = p_rows.shape[2] // TILE_ROWS if full_v or full_k else (b1 + TILE_ROWS - 1) // TILE_ROWS
        for task in prange(bh * n_keys):
            z = np.int64(task // n_keys)
            j0 = np.int64(task % n_keys) * TILE_ROWS
            key_fold(p_rows[z], ds_rows[z], z, j0, b0, b1, full_v, full_k, dc, qc, acc_v[z], acc_k[z])
    else:  # STORE: a task per (head, key panel)
        n_keys = (t_count + TILE_ROWS - 1) // TILE_ROWS
        for task in prange(bh * n_keys):
            z = np.int64(task // n_keys)
            _store_keys(acc_v[z], acc_k[z], z, np.int64(task % n_keys) * TILE_ROWS, scale, dc, qc, dk, dv, fused)


@njit(cache=True)
def key_fold_v1(p_rows, ds_rows, z, j0, b0, b1, full_v, full_k, dc, qc, acc_v, acc_k):
    """_key_fold in arithmetic version 1."""
    _key_fold(p_rows, ds_rows, z, j0, b0, b1, full_v, full_k, dc, qc, acc_v, acc_k, False)


@njit(cache=True)
def key_fold_v2(p_rows, ds_rows, z, j0, b0, b1, full_v, full_k, dc, qc, acc_v, acc_k):
    """_key_fold in arithmetic version 2."""
    _key_fold(p_rows, ds_rows, z, j0, b0, b1, full_v, full_k, dc, qc, acc_v, acc_k, True)


@njit(inline="always")
def _key_fold(p_rows, ds_rows, z, j0, b0, b1, full_v, full_k, dc, qc, acc_v, acc_k, fused):
    """Keys j0 .. j0 + TILE_ROWS - 1 of head z: dv's and dk's folds so far (acc_v, acc_k rows j0 ..) taken on
    over the block's rows b0 .. b1 - 1 (p_rows, ds_rows row 0 is b0), from the key panel's first row on
    (or all where `full_v`, `full_k`)."""
    lo = b0 if full_v else max(b0, j0)
    if lo < b1:
        _fold_rows(p_rows[lo - b0 : b1 - b0, j0 : j0 + TILE_ROWS], dc[z], lo, b1, acc_v, j0, fused)
    lo = b0 if full_k else max(b0, j0)
    if lo < b1:
        _fold_rows(ds_rows[lo - b0 : b1 - b0, j0 : j0 + TILE_ROWS], qc[z], lo, b1, acc_k, j0, fused)


@njit(inline="always")
def _fold_rows(apanel, panels, i_lo, i_hi, acc, j0, fused):
    """acc[j0 : j0 + TILE_ROWS, :] += apanel (i_hi - i_lo, TILE_ROWS: rows i_lo .. i_hi - 1, k-major) times
    panels[:, i_lo:i_hi] (G, T, TC), i in increasing order, each tile started from acc and stored back."""
    for g in range(panels.shape[0]):
        c = g * TILE_COLS
        fold_tile_into(apanel, panels[g, i_lo:], acc, j0, c, acc, j0, c, 0, i_hi - i_lo, fused, False)


@njit(inline="always")
def _store_keys(acc_v, acc_k, z, j0, scale, dc, qc, dk, dv, fused):
    """dv and dk of head z's keys j0 .. from their folds (k_end = T: nothing left out at the end, no carry)."""
    t_count = dv.shape[1]
    store_rows(acc_v[j0:], z, j0, dv, scale, False, acc_v, dc[z], t_count, fused)
    store_rows(acc_k[j0:], z, j0, dk, scale, True, acc_k, qc[z], t_count, fused)
