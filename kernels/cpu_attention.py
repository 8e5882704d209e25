"""Causal attention's forward pass in one kernel of the `cpu` backend: scores, softmax and P V a row panel at a time.

    attention_rows(q, k, v, full, fused) -> (o (BH, T, D), p (BH, T, T), lse (BH*T,))
    attention_rows_unkept(q, k, v, full, fused) -> (o, lse), p never held whole (a panel's rows a task)

(and the backward of a stored p, attention_rows_backward; the one that
recomputes p, kernels/cpu_attention_recompute.py, calls this module's
softmax_rows_v1/_v2 and query_panel_v1/_v2, compiled once for both)

The bits are those of the composition that kernels/cpu.py `attention` wrote
as three passes (docs/arithmetic.md 4.4): S = q kᵀ by the matmul's fold
(kernels/cpu_matmul.py: per output one fold over k = 0..D-1 from +0.0,
version 1 or 2), S * scale rounded once, the causal softmax of each row
(cpu_nn.causal_softmax_row: its halving trees, exp and division), then O =
P V folded over j in increasing order. Here a task is one panel of
TILE_ROWS query rows of one batch element: its scores go through the
register micro-kernel (cpu_tile.fold_tile_into) into a buffer that stays in
L1/L2, only the columns up to the panel's last row (the rest is never read),
are scaled and soft-maxed row by row into p, and the panel's P rows, read
where the softmax wrote them (a transposed view of p; only a last panel
short of TILE_ROWS rows is copied, padded with +0.0), fold against V's
panels at once. The backward reads p and dS the same way: its dq products
through transposed views of the query panel's rows, its dv and dk products
through views of the key panel's columns (row t of such a view is
TILE_ROWS contiguous values); in the step, the copies these replaced cost
the backward a third of its time (11m: 5.7 -> 3.9 ms a layer). Where the heads
keep the threads evenly busy (by_heads) a backward task is a whole head: its
query panels write its dS into the thread's own buffer and its key panels
read it back from cache (a task per panel wrote every head's dS to memory
first). The three passes wrote
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

from collections.abc import Callable

import numba
import numpy as np
from numba import njit, prange
from numba.extending import overload

from kernels import constants as K
from kernels import validate
from kernels.cpu_nn import causal_softmax_backward_row, causal_softmax_row
from kernels.cpu_pack import pack_k_major, pack_transposed
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
    return _rows(q, k, v, full, fused, True)


def attention_rows_unkept(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, full: bool, fused: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(o, lse) of attention_rows, the same bits, without p: each task writes its panel's rows into a buffer
    of its own (TILE_ROWS x T) instead of the B*H*T*T floats of p."""
    o, _, lse = _rows(q, k, v, full, fused, False)
    return o, lse


def _rows(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, full: bool, fused: bool, keep: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bh, t, d = q.shape
    q, k, v = (np.ascontiguousarray(x) for x in (q, k, v))
    o = np.empty((bh, t, d), F32)
    p = np.empty((bh, t, t) if keep else (1, 1, 1), F32)  # numpy's allocation: huge pages for a head-sized array
    lse = np.empty(bh * t, F32)
    kp = keys(k)
    vp = columns(v)  # V's panels of columns
    (_attention_rows_fused if fused else _attention_rows)(q, attention_scale(d), full, keep, o, p, lse, kp, vp)
    return o, p, lse


def keys(x: np.ndarray) -> np.ndarray:
    """x (BH, T, D) as panels of keys (BH, ceil(T / TC), D, TC): pack_keys' values."""
    bh, t, d = x.shape
    dst = np.empty((bh, -(-t // TILE_COLS), d, TILE_COLS), F32)
    pack_keys(x, dst)
    return dst


# Each task's work is a function compiled on its own (per version), called from the prange loop: inlined
# there, numba's parfor passes went through every helper's code, and each kernel took 13-17 s to compile.
# Each version's kernel is its own dispatcher (the no-FMA audit reads version 1's machine code alone); their
# loops are one inline body, whose `fused` (a literal) picks the task functions of that version only
# (of_version: an overload on the literal, so the other version's functions are never referenced).
@njit(parallel=True, cache=True)
def _attention_rows(q, scale, full, keep, o, p, lse, kp, vp):
    """Every (batch element, row panel) task in arithmetic version 1: acc + (a * b) per step of each fold."""
    _rows_tasks(q, scale, full, keep, o, p, lse, kp, vp, False)


@njit(parallel=True, cache=True)
def _attention_rows_fused(q, scale, full, keep, o, p, lse, kp, vp):
    """Every (batch element, row panel) task in arithmetic version 2: fma(a, b, acc) per step of each fold."""
    _rows_tasks(q, scale, full, keep, o, p, lse, kp, vp, True)


@njit(inline="always")
def _rows_tasks(q, scale, full, keep, o, p, lse, kp, vp, fused):
    bh, t_count = q.shape[0], q.shape[1]
    n_pan = (t_count + TILE_ROWS - 1) // TILE_ROWS
    panel = of_version(fused, _panel_v1, _panel_v2)
    for task in prange(bh * n_pan):
        z = task // n_pan
        panel(q, z, _zigzag(task - z * n_pan, n_pan) * TILE_ROWS, scale, full, keep, o, p, lse, kp, vp)


def of_version(fused, v1, v2):
    """v2 where `fused`, else v1 (compiled: for a literal `fused` only, by the overload below)."""
    return v2 if fused else v1


@overload(of_version, inline="always", prefer_literal=True)
def of_version_literal(fused, v1, v2):
    """of_version for the literal `fused`: the chosen function, the other one never referenced."""
    which = getattr(fused, "literal_value", None)
    if which is True:
        return lambda fused, v1, v2: v2
    if which is False:
        return lambda fused, v1, v2: v1
    return None


@njit(cache=True)
def _panel_v1(q, z, i0, scale, full, keep, o, p, lse, kp, vp):
    """_panel in arithmetic version 1."""
    _panel(q, z, i0, scale, full, keep, o, p, lse, kp, vp, False)


@njit(cache=True)
def _panel_v2(q, z, i0, scale, full, keep, o, p, lse, kp, vp):
    """_panel in arithmetic version 2."""
    _panel(q, z, i0, scale, full, keep, o, p, lse, kp, vp, True)


@njit(inline="always")
def _zigzag(r, n):
    """The r-th of n panels in the order 0, n - 1, 1, n - 2, ...: a contiguous run holds cheap and dear ones."""
    return r // 2 if r % 2 == 0 else n - 1 - r // 2


@njit(parallel=True, cache=True)
def pack_keys(x, dst):
    """dst[z, g, kk, c] = x[z, g * TILE_COLS + c, kk], +0.0 past T: x (BH, T, D) as panels of keys (D, TC).

    The matmul's packing of a transposed B (cpu_pack.pack_transposed: 32 x 16 blocks through the registers)."""
    bh, t_count, d = x.shape
    n = dst.shape[1]
    for task in prange(bh * n):
        pack_transposed(x, task // n, t_count, 0, d, task % n, dst)


@njit(parallel=True, cache=True)
def pack_columns(x, dst):
    """dst[z, g, j, c] = x[z, j, g * TILE_COLS + c], +0.0 past D: x (BH, T, D) as panels of columns (T, TC).

    The matmul's packing of a B read along its rows (cpu_pack.pack_k_major: whole panels as vector copies)."""
    bh, t_count, d = x.shape
    n = dst.shape[1]
    for task in prange(bh * n):
        z, g = task // n, task % n
        pack_k_major(x, z, d, 0, t_count, g, g + 1, dst)


def columns(x: np.ndarray) -> np.ndarray:
    """x (BH, T, D) as panels of columns (BH, ceil(D / TC), T, TC): pack_columns' values; a view of x itself
    where D is TILE_COLS and x is C-contiguous (its rows are the one panel already)."""
    bh, t, d = x.shape
    if d == TILE_COLS and x.flags.c_contiguous:
        return x.reshape(bh, 1, t, d)
    dst = np.empty((bh, -(-d // TILE_COLS), t, TILE_COLS), F32)
    pack_columns(x, dst)
    return dst


@njit(inline="always")
def rows_k_major(x, z, i0):
    """x[z, i0 : i0 + TILE_ROWS] (of x (BH, T, D)) k-major: a (D, TILE_ROWS) panel, +0.0 past T."""
    t_count, d = x.shape[1], x.shape[2]
    a = np.empty((d, TILE_ROWS), F32)
    for i in range(TILE_ROWS):
        for kk in range(d):
            a[kk, i] = x[z, i0 + i, kk] if i0 + i < t_count else F32(0.0)
    return a


@njit(inline="always")
def fold_panels(apanel, panels, k_lo, k_end, fused):
    """The (TILE_ROWS, G * TILE_COLS) block of apanel's rows times panels (G, K, TC), folding k from k_lo to
    k_end - 1 from +0.0 (apanel's row 0 is k_lo)."""
    out = np.empty((TILE_ROWS, panels.shape[0] * TILE_COLS), F32)
    for g in range(panels.shape[0]):
        fold_tile_into(apanel, panels[g, k_lo:], out, 0, 0, out, 0, g * TILE_COLS, 0, k_end - k_lo, fused, True)
    return out


@njit(inline="always")
def store_rows(out, z, i0, dst, scale, scaled, a_rows, panels, k_end, fused):
    """dst[z, i0 + i, c] = out[i, c] (times scale if `scaled`) for the rows below T and c < D.

    Version 2 with k_end < T: an output that ends -0.0 is first carried through the terms left out, in order
    (a_rows[i, j] times panels[c // TC, j, c % TC] for j >= k_end: +0.0 times a finite value); a_rows (at
    least the panel's rows below T, T columns) are the panel's own rows of the fold's left operand."""
    t_count, d = dst.shape[1], dst.shape[2]
    for i in range(min(TILE_ROWS, t_count - i0)):
        for c in range(d):
            x = out[i, c]
            if fused and k_end < t_count and bits_from_f32(x) == NEG_ZERO_BITS:
                for j in range(k_end, t_count):
                    x = mac_f32(x, a_rows[i, j], panels[c // TILE_COLS, j, c % TILE_COLS], True)
            dst[z, i0 + i, c] = x * scale if scaled else x


@njit(inline="always")
def _panel(q, z, i0, scale, full, keep, o, p, lse, kp, vp, fused):
    """Rows i0 .. i0 + TILE_ROWS - 1 (those below T) of batch element z: their scores, softmax and P V; their
    p rows written into p[z] where `keep`, else into the task's own buffer (p is not read)."""
    t_count = q.shape[1]
    i1 = min(t_count, i0 + TILE_ROWS)
    rows = p[z, i0:i1] if keep else np.empty((i1 - i0, t_count), F32)
    of_version(fused, softmax_rows_v1, softmax_rows_v2)(q, z, i0, scale, kp, rows, lse)
    k_end = t_count if full else i1  # the j of P V the panel folds
    out = fold_panels(query_columns(rows, 0, k_end), vp[z], 0, k_end, fused)
    store_rows(out, z, i0, o, scale, False, rows, vp[z], k_end, fused)


# Compiled on their own (not inlined): the forward's panels and the backward that recomputes p
# (kernels/cpu_attention_recompute.py) call the one compiled function, as they do query_panel_v1 and _v2.
@njit(cache=True)
def softmax_rows_v1(q, z, i0, scale, kp, rows, lse):
    """softmax_rows in arithmetic version 1."""
    softmax_rows(q, z, i0, scale, kp, rows, lse, False)


@njit(cache=True)
def softmax_rows_v2(q, z, i0, scale, kp, rows, lse):
    """softmax_rows in arithmetic version 2."""
    softmax_rows(q, z, i0, scale, kp, rows, lse, True)


@njit(inline="always")
def softmax_rows(q, z, i0, scale, kp, rows, lse, fused):
    """The p rows of batch element z's query rows i0 .. i0 + len(rows) - 1 (at most TILE_ROWS, below T) into
    rows (each T wide or more: +0.0 past the diagonal), and their log-sum-exp into lse[z * T + t]: the
    scores folded over D (K's panels kp[z] up to the last row), scaled once, the causal softmax of each row."""
    t_count = q.shape[1]
    i1 = i0 + rows.shape[0]
    s = fold_panels(rows_k_major(q, z, i0), kp[z, : (i1 + TILE_COLS - 1) // TILE_COLS], 0, q.shape[2], fused)
    buf = np.empty(next_pow2(t_count), F32)  # the softmax's halving trees
    for i in range(i1 - i0):
        t = i0 + i
        row = s[i]  # the columns j < i1 of the scores
        for j in range(t + 1):
            row[j] = row[j] * scale
        m, total = causal_softmax_row(row, rows[i], buf, t)
        lse[z * t_count + t] = m + log_f32(total)


@njit(inline="always")
def key_columns(m, j0, t_lo):
    """m[t_lo:, j0 : j0 + TILE_ROWS] (of m (rows, T)) as a (rows - t_lo, TILE_ROWS) panel, +0.0 past T: a view
    of m where the panel's TILE_ROWS columns lie within m (row t of it is contiguous), else a padded copy."""
    if j0 + TILE_ROWS <= m.shape[1]:
        return m[t_lo:, j0 : j0 + TILE_ROWS]
    return _columns_k_major(m, j0, t_lo)


@njit(inline="always")
def _columns_k_major(m, j0, t_lo):
    """key_columns' padded copy."""
    t_count, width = m.shape[0], m.shape[1]
    a = np.empty((t_count - t_lo, TILE_ROWS), F32)
    for t in range(t_lo, t_count):
        row = m[t]
        for i in range(TILE_ROWS):
            a[t - t_lo, i] = row[j0 + i] if j0 + i < width else F32(0.0)
    return a


@njit(inline="always")
def query_columns(rows, i0, k_end):
    """rows[i0 : i0 + TILE_ROWS, :k_end] (of rows (R, >= k_end)) k-major, a (k_end, TILE_ROWS) panel, +0.0
    past R: a transposed view of the rows where all TILE_ROWS lie within R, else a padded copy."""
    if i0 + TILE_ROWS <= rows.shape[0]:
        return rows[i0 : i0 + TILE_ROWS, :k_end].T
    return _columns_of_rows(rows, i0, k_end)


@njit(inline="always")
def _columns_of_rows(rows, i0, k_end):
    """query_columns' padded copy."""
    a = np.empty((k_end, TILE_ROWS), F32)
    for i in range(TILE_ROWS):
        if i0 + i < rows.shape[0]:
            row = rows[i0 + i]
            for j in range(k_end):
                a[j, i] = row[j]
        else:
            for j in range(k_end):
                a[j, i] = F32(0.0)
    return a


def attention_backward_checked(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    p: np.ndarray,
    do: np.ndarray,
    fused: bool,
    masked_are_zeros: Callable[[], bool],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """attention_rows_backward after validate's checks, each fold full where a term left out could matter:
    dq's where k is not finite, dv's where do is not or `masked_are_zeros()` (asked only then) is False,
    dk's where q is not."""
    validate.check_attention_backward(q, k, v, p, do)
    finite = [bool(np.isfinite(x).all()) for x in (k, do, q)]
    full = (not finite[0], not (finite[1] and masked_are_zeros()), not finite[2])  # dq's, dv's, dk's fold
    return attention_rows_backward(q, k, v, p, do, full, fused)


def attention_rows_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    p: np.ndarray,
    do: np.ndarray,
    full: tuple[bool, bool, bool],
    fused: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv), each (BH, T, D), of kernels/cpu.py attention_backward's composition, bit for bit.

    dP = do vᵀ and dS (the softmax's backward) a panel of query rows at a time, dq = dS k * scale folded at
    once; then per panel of keys dv = Pᵀ do and dk = dSᵀ q * scale. `full` = (dq, dv, dk): fold every term
    of that product (its other operand is not finite, or P's masked entries are not zeros) instead of
    leaving out the masked ones. A task is one panel (of query rows, then of keys) of one head, or, where
    by_heads says so, one whole head, its dS in the thread's own buffer: the same folds either way.
    Precondition: kernels/validate.check_attention_backward."""
    bh, t, d = q.shape
    q, k, v, p, do = (np.ascontiguousarray(x) for x in (q, k, v, p, do))
    dq, dk, dv = (np.empty((bh, t, d), F32) for _ in range(3))
    vk = keys(v)  # V's panels of keys
    kc, dc, qc = columns(k), columns(do), columns(q)  # k's, do's, q's panels of columns
    heads = by_heads(bh, t, numba.get_num_threads())
    if heads:  # dS a head at a time, in a buffer of the thread's own
        threads_max: int = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
        ds = np.empty((threads_max, t, t), F32)
    else:
        ds = np.empty((bh, t, t), F32)
    kernel = _attention_backward_fused if fused else _attention_backward
    kernel(heads, do, p, attention_scale(d), full[0], full[1], full[2], ds, vk, kc, dc, qc, dq, dk, dv)
    return dq, dk, dv


HEADS_MAX_T = 1024  # by_heads' longest sequence: a thread's dS of one head is T * T floats (4 MiB at 1,024)


def by_heads(bh: int, t: int, threads: int) -> bool:
    """Whether the backward runs a task per head (_backward_heads) rather than per panel of rows.

    A head's dS then stays in its thread's buffer (in L2 at T = 256) between its query panels, which write
    it, and its key panels, which read it, and P is read while still in cache: against the panel tasks, which
    write every head's dS to memory and read it back, an 11m layer's backward (32 heads of 256 x 32) took
    12-13% less (docs/benchmarks.md). Taken where the heads keep every thread equally busy (a multiple of the
    threads, or at least four a thread: heads_keep_threads_busy) and T is at most HEADS_MAX_T."""
    return t <= HEADS_MAX_T and heads_keep_threads_busy(bh, threads)


def heads_keep_threads_busy(bh: int, threads: int) -> bool:
    """Whether bh tasks of equal cost, a head each, keep `threads` threads evenly busy: a multiple of them, or
    at least four a thread (also the rule of kernels/cpu_attention_recompute.py's head tasks)."""
    return bh >= threads and (bh % threads == 0 or bh >= 4 * threads)


@njit(parallel=True, cache=True)
def _attention_backward(heads, do, p, scale, full_q, full_v, full_k, ds, vk, kc, dc, qc, dq, dk, dv):
    """The backward's tasks in arithmetic version 1: a task per head where `heads` (by_heads; ds (threads, T,
    T)), else query panels (dP, dS, dq), then key panels (dv, dk) (ds (BH, T, T))."""
    if heads:
        _backward_heads(do, p, scale, full_q, full_v, full_k, ds, vk, kc, dc, qc, dq, dk, dv, False)
    else:
        _backward_panels(do, p, scale, full_q, full_v, full_k, ds, vk, kc, dc, qc, dq, dk, dv, False)


@njit(parallel=True, cache=True)
def _attention_backward_fused(heads, do, p, scale, full_q, full_v, full_k, ds, vk, kc, dc, qc, dq, dk, dv):
    """The backward's tasks in arithmetic version 2."""
    if heads:
        _backward_heads(do, p, scale, full_q, full_v, full_k, ds, vk, kc, dc, qc, dq, dk, dv, True)
    else:
        _backward_panels(do, p, scale, full_q, full_v, full_k, ds, vk, kc, dc, qc, dq, dk, dv, True)


@njit(inline="always")
def _backward_panels(do, p, scale, full_q, full_v, full_k, ds, vk, kc, dc, qc, dq, dk, dv, fused):
    """A task per panel: every head's query panels, then every head's key panels (ds (BH, T, T))."""
    bh, t_count = do.shape[0], do.shape[1]
    n_pan = (t_count + TILE_ROWS - 1) // TILE_ROWS
    query_panel = of_version(fused, query_panel_v1, query_panel_v2)
    key_panel = of_version(fused, _key_panel_v1, _key_panel_v2)
    for task in prange(bh * n_pan):
        z = task // n_pan
        i0 = _zigzag(task - z * n_pan, n_pan) * TILE_ROWS
        i1 = min(t_count, i0 + TILE_ROWS)
        query_panel(do, p[z, i0:i1], ds[z, i0:i1], z, i0, scale, full_q, vk, kc, dq)
    for task in prange(bh * n_pan):
        z = task // n_pan
        j0 = _zigzag(task - z * n_pan, n_pan) * TILE_ROWS
        key_panel(p, ds, z, z, j0, scale, full_v, full_k, dc, qc, dk, dv)


@njit(inline="always")
def _backward_heads(do, p, scale, full_q, full_v, full_k, ds, vk, kc, dc, qc, dq, dk, dv, fused):
    """A task per head: its query panels write its dS into ds[the thread], its key panels read it back."""
    bh, t_count = do.shape[0], do.shape[1]
    n_pan = (t_count + TILE_ROWS - 1) // TILE_ROWS
    query_panel = of_version(fused, query_panel_v1, query_panel_v2)
    key_panel = of_version(fused, _key_panel_v1, _key_panel_v2)
    for head in prange(bh):
        z = np.int64(head)  # prange's index is unsigned: the task functions take z as the panel loops' int64
        me = numba.get_thread_id()
        for r in range(n_pan):
            i0 = r * TILE_ROWS
            i1 = min(t_count, i0 + TILE_ROWS)
            query_panel(do, p[z, i0:i1], ds[me, i0:i1], z, i0, scale, full_q, vk, kc, dq)
        for r in range(n_pan):
            key_panel(p, ds, z, me, r * TILE_ROWS, scale, full_v, full_k, dc, qc, dk, dv)


@njit(cache=True)
def query_panel_v1(do, p_rows, ds_rows, z, i0, scale, full_q, vk, kc, dq):
    """_query_panel in arithmetic version 1 (also the task of kernels/cpu_attention_recompute.py)."""
    _query_panel(do, p_rows, ds_rows, z, i0, scale, full_q, vk, kc, dq, False)


@njit(cache=True)
def query_panel_v2(do, p_rows, ds_rows, z, i0, scale, full_q, vk, kc, dq):
    """_query_panel in arithmetic version 2."""
    _query_panel(do, p_rows, ds_rows, z, i0, scale, full_q, vk, kc, dq, True)


@njit(cache=True)
def _key_panel_v1(p, ds, z, zs, j0, scale, full_v, full_k, dc, qc, dk, dv):
    """_key_panel in arithmetic version 1."""
    _key_panel(p, ds, z, zs, j0, scale, full_v, full_k, dc, qc, dk, dv, False)


@njit(cache=True)
def _key_panel_v2(p, ds, z, zs, j0, scale, full_v, full_k, dc, qc, dk, dv):
    """_key_panel in arithmetic version 2."""
    _key_panel(p, ds, z, zs, j0, scale, full_v, full_k, dc, qc, dk, dv, True)


@njit(inline="always")
def _query_panel(do, p_rows, ds_rows, z, i0, scale, full_q, vk, kc, dq, fused):
    """Query rows i0 .. i0 + len(p_rows) - 1 (at most TILE_ROWS, below T) of batch element z, their p rows
    p_rows: dP = do vᵀ (columns up to the panel's last row), dS row by row into ds_rows, dq = dS k * scale."""
    t_count, d = do.shape[1], do.shape[2]
    i1 = i0 + p_rows.shape[0]
    dp = fold_panels(rows_k_major(do, z, i0), vk[z, : (i1 + TILE_COLS - 1) // TILE_COLS], 0, d, fused)
    buf = np.empty(next_pow2(t_count), F32)
    for i in range(i1 - i0):
        causal_softmax_backward_row(p_rows[i], dp[i], ds_rows[i], buf, i0 + i)
    k_end = t_count if full_q else i1
    out = fold_panels(query_columns(ds_rows, 0, k_end), kc[z], 0, k_end, fused)
    store_rows(out, z, i0, dq, scale, True, ds_rows, kc[z], k_end, fused)


@njit(inline="always")
def _key_panel(p, ds, z, zs, j0, scale, full_v, full_k, dc, qc, dk, dv, fused):
    """Keys j0 .. j0 + TILE_ROWS - 1 of batch element z (its dS rows: ds[zs]): dv = Pᵀ do, dk = dSᵀ q * scale
    (leading terms left out where allowed: no -0.0 to carry)."""
    t_count = p.shape[1]
    lo = 0 if full_v else j0
    out = fold_panels(key_columns(p[z], j0, lo), dc[z], lo, t_count, fused)
    store_rows(out, z, j0, dv, scale, False, p[z], dc[z], t_count, fused)  # t_count: nothing to carry
    lo = 0 if full_k else j0
    out = fold_panels(key_columns(ds[zs], j0, lo), qc[z], lo, t_count, fused)
    store_rows(out, z, j0, dk, scale, True, ds[zs], qc[z], t_count, fused)
