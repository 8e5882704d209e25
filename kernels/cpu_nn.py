"""Row-wise network kernels of the `cpu` backend (docs/arithmetic.md section 4).

Causal softmax and its backward, RMSNorm and its backward, cross-entropy and
its backward, embedding gather and scatter-add; for op table 1 (the lab mode,
whose face is kernels/cpu_lab.py) log-softmax and its backward, and the
causal softmax with each row's log-sum-exp. Each output row depends on
one input row only (the scatter-add: on tokens in increasing order), so prange
splits rows (or column blocks) between threads; inside a row the halving
trees of cpu_scalar run as the document writes them.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from kernels.cpu_scalar import (
    NEG_INF,
    NEG_ZERO,
    ONE,
    ZERO,
    exp_f32,
    log_f32,
    next_pow2,
    pmax_fast,
    psum_fast,
    tree_max,
    tree_sum,
)

ROWS_PER_TASK = 64  # rows per prange task: amortises the scratch allocation
EMB_COLS_PER_TASK = 64  # column block of the embedding scatter-add
LAB_ROWS_PER_TASK = 16  # rows per task of the lab's fused rows (kernels/cpu_lab.py): rows up to V wide


@njit(inline="always")
def causal_softmax_row(src, dst, buf, t):
    """dst[:t+1] = softmax of src[:t+1] (section 4.3), dst[t+1:] = +0.0; returns (m, total) of the row.

    m = pmax over j <= t, total = psum of e = exp(src[j] - m) over j <= t, both halving trees over the
    row padded to P2(t+1) (with -inf for the max, -0.0 for the sum: the identities, so the padded trees
    are the unpadded row's). buf: scratch of at least P2(t+1).
    """
    n = t + 1
    p = next_pow2(n)
    for j in range(n):
        buf[j] = src[j]
    for j in range(n, p):
        buf[j] = NEG_INF
    m = tree_max(buf, p)
    for j in range(n):
        e = exp_f32(src[j] - m)
        dst[j] = e
        buf[j] = e
    for j in range(n, p):
        buf[j] = NEG_ZERO  # -0.0, not +0.0: keeps the tree of the unpadded row
    total = tree_sum(buf, p)
    for j in range(n):
        dst[j] = dst[j] / total
    for j in range(n, dst.shape[0]):
        dst[j] = ZERO
    return m, total


@njit(parallel=True, cache=True)
def softmax_causal_3d(s):
    """P (BH, T, T) from scores s (BH, T, T): softmax over j <= t, +0.0 for j > t."""
    bh, t_count, _ = s.shape
    out = np.empty_like(s)  # (BH, T, T)
    rows = bh * t_count
    n_tasks = (rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        buf = np.empty(next_pow2(t_count), np.float32)  # scratch (P2(T),)
        for row in range(task * ROWS_PER_TASK, min(rows, (task + 1) * ROWS_PER_TASK)):
            z = row // t_count
            t = row - z * t_count
            causal_softmax_row(s[z, t], out[z, t], buf, t)
    return out


@njit(inline="always")
def causal_softmax_backward_row(prow, dprow, dst, buf, t):
    """dst[:t+1] = prow * (dprow - c) with c = psum(prow * dprow over j <= t), dst[t+1:] = +0.0 (section 4.3).

    The products go into buf, which is padded with -0.0 to its whole length (a power of two >= t + 1:
    padding a psum to any such width gives the same bits); dprow is read at j <= t only."""
    n = t + 1
    for j in range(n):
        buf[j] = prow[j] * dprow[j]
    for j in range(n, buf.shape[0]):
        buf[j] = NEG_ZERO
    c = psum_fast(buf, buf)  # in registers for widths 16..1024
    for j in range(n):
        dst[j] = prow[j] * (dprow[j] - c)
    for j in range(n, dst.shape[0]):
        dst[j] = ZERO


@njit(parallel=True, cache=True)
def softmax_causal_backward_3d(p_in, dp):
    """dS (BH, T, T) = P * (dP - psum(P * dP over j <= t)) for j <= t, +0.0 beyond.

    Every row is padded to the same P2(T) entries, -0.0 past j = t: one fixed
    width makes each row's tree the same code, in registers.
    """
    bh, t_count, _ = p_in.shape
    out = np.empty_like(p_in)  # (BH, T, T)
    rows = bh * t_count
    width = next_pow2(t_count)
    n_tasks = (rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        buf = np.empty(width, np.float32)  # scratch (P2(T),)
        for row in range(task * ROWS_PER_TASK, min(rows, (task + 1) * ROWS_PER_TASK)):
            z = row // t_count
            t = row - z * t_count
            causal_softmax_backward_row(p_in[z, t], dp[z, t], out[z, t], buf, t)
    return out


@njit(parallel=True, cache=True)
def log_softmax_2d(x, out):
    """out = x - (m + log(s)) per row of x (R, C): m = pmax(row), s = psum(exp(row - m)).

    out (R, C) is the caller's (kernels/cpu_lab.py keeps a vocabulary-wide one from step to step, where
    numba's allocation faulted 206 MB in anew in a 125m step). Precondition: C >= 1."""
    r_count, c_count = x.shape
    n_tasks = (r_count + LAB_ROWS_PER_TASK - 1) // LAB_ROWS_PER_TASK
    for task in prange(n_tasks):
        buf = np.empty(next_pow2(c_count), np.float32)  # scratch (P2(C),)
        for r in range(task * LAB_ROWS_PER_TASK, min(r_count, (task + 1) * LAB_ROWS_PER_TASK)):
            xr, dst = x[r], out[r]  # (C,) each; dst holds e until the last loop
            m = pmax_fast(xr, buf)
            for j in range(c_count):
                dst[j] = exp_f32(xr[j] - m)
            lse = m + log_f32(psum_fast(dst, buf))
            for j in range(c_count):
                dst[j] = xr[j] - lse
    return out


@njit(parallel=True, cache=True)
def log_softmax_backward_2d(y, dy, out):
    """out = dy - exp(y) * psum(dy) per row; y the log-softmax output, y, dy and out (R, C) (out the
    caller's, as log_softmax_2d's)."""
    r_count, c_count = y.shape
    n_tasks = (r_count + LAB_ROWS_PER_TASK - 1) // LAB_ROWS_PER_TASK
    for task in prange(n_tasks):
        buf = np.empty(next_pow2(c_count), np.float32)  # scratch (P2(C),)
        for r in range(task * LAB_ROWS_PER_TASK, min(r_count, (task + 1) * LAB_ROWS_PER_TASK)):
            yr, dyr, dst = y[r], dy[r], out[r]  # (C,) each
            c = psum_fast(dyr, buf)
            for j in range(c_count):
                dst[j] = dyr[j] - exp_f32(yr[j]) * c
    return out


@njit(parallel=True, cache=True)
def rmsnorm_2d(x, w, eps):
    """(y (R, C), rstd (R,)) of section 4.3. Preconditions: C >= 1, eps float32.

    ss / float32(C) is a true division (not a multiply by 1/C): the document's
    rounding.
    """
    r_count, c_count = x.shape
    cf = np.float32(c_count)
    y = np.empty_like(x)  # (R, C)
    rstd = np.empty(r_count, np.float32)  # (R,)
    p = next_pow2(c_count)
    n_tasks = (r_count + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        buf = np.empty(p, np.float32)  # scratch (P2(C),)
        for r in range(task * ROWS_PER_TASK, min(r_count, (task + 1) * ROWS_PER_TASK)):
            xr = x[r]  # (C,)
            sq = buf[:c_count]  # (C,)
            for j in range(c_count):
                sq[j] = xr[j] * xr[j]
            ss = psum_fast(sq, buf)  # in place: psum_row's first level only reads ahead of its writes
            rs = ONE / np.sqrt(ss / cf + eps)
            rstd[r] = rs
            yr = y[r]  # (C,)
            for j in range(c_count):
                yr[j] = (xr[j] * rs) * w[j]
    return y, rstd


@njit(parallel=True, cache=True)
def rmsnorm_backward_rows(x, w, rstd, dy):
    """(dx (R, C), dy * xhat (R, C)) of section 4.3; dw is sum_cols of the second."""
    r_count, c_count = x.shape
    cf = np.float32(c_count)
    dx = np.empty_like(x)  # (R, C)
    prod = np.empty_like(x)  # (R, C) dy * xhat, summed down columns by the caller
    p = next_pow2(c_count)
    n_tasks = (r_count + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        buf = np.empty(p, np.float32)  # scratch (P2(C),)
        xhat = np.empty(c_count, np.float32)  # (C,)
        g = np.empty(c_count, np.float32)  # (C,)
        for r in range(task * ROWS_PER_TASK, min(r_count, (task + 1) * ROWS_PER_TASK)):
            rs = rstd[r]
            xr, dyr, dxr, pr = x[r], dy[r], dx[r], prod[r]  # (C,) each
            for j in range(c_count):
                xh = xr[j] * rs
                gj = dyr[j] * w[j]
                xhat[j] = xh
                g[j] = gj
                pr[j] = dyr[j] * xh
                buf[j] = gj * xh
            for j in range(c_count, p):
                buf[j] = NEG_ZERO
            kr = tree_sum(buf, p) / cf
            for j in range(c_count):
                dxr[j] = (g[j] - xhat[j] * kr) * rs
    return dx, prod


@njit(inline="always")
def _row_softmax_parts(lr, buf, e):
    """(m, s) of one logits row lr (V,); e (V,) receives exp(l - m). buf: scratch (>= P2(V),)."""
    v = lr.shape[0]
    m = pmax_fast(lr, buf)
    for j in range(v):
        e[j] = exp_f32(lr[j] - m)
    return m, psum_fast(e, buf)


@njit(parallel=True, cache=True)
def cross_entropy_rows(logits, targets):
    """loss_i = (m_i + log(s_i)) - l[i, t_i] for each row (section 4.4) -> (N,)."""
    n, v = logits.shape
    loss = np.empty(n, np.float32)  # (N,)
    n_tasks = (n + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        buf = np.empty(next_pow2(v), np.float32)  # scratch (P2(V),)
        e = np.empty(v, np.float32)  # (V,)
        for i in range(task * ROWS_PER_TASK, min(n, (task + 1) * ROWS_PER_TASK)):
            lr = logits[i]  # (V,)
            m, s = _row_softmax_parts(lr, buf, e)
            lse = m + log_f32(s)
            loss[i] = lse - lr[targets[i]]
    return loss


@njit(parallel=True, cache=True)
def cross_entropy_backward_2d(logits, targets, g, dl):
    """dlogits (N, V) = (e / s - onehot(t)) * g (section 4.4) into dl, a new (N, V) array. Precondition: g float32.

    dl comes from numpy (huge pages); numba's allocator faults a new array in 4 KiB at a time.
    """
    n, v = logits.shape
    n_tasks = (n + ROWS_PER_TASK - 1) // ROWS_PER_TASK
    for task in prange(n_tasks):
        buf = np.empty(next_pow2(v), np.float32)  # scratch (P2(V),)
        for i in range(task * ROWS_PER_TASK, min(n, (task + 1) * ROWS_PER_TASK)):
            dst = dl[i]  # (V,), holds e until the last loop
            _, s = _row_softmax_parts(logits[i], buf, dst)
            t = targets[i]
            for j in range(v):
                hot = ONE if j == t else ZERO
                dst[j] = (dst[j] / s - hot) * g


@njit(parallel=True, cache=True)
def embedding_gather(table, idx):
    """out[n, :] = table[idx[n], :] -> (N, C). Precondition: idx in [0, V)."""
    n, c = idx.shape[0], table.shape[1]
    out = np.empty((n, c), np.float32)  # (N, C)
    for i in prange(n):
        src = table[idx[i]]  # (C,)
        dst = out[i]  # (C,)
        for j in range(c):
            dst[j] = src[j]
    return out


@njit(parallel=True, cache=True)
def embedding_scatter_add(idx, dout, dtable):
    """dtable (V, C), given all +0.0: dtable[idx[n]] += dout[n] for n = 0, 1, ... (section 4.5).

    Threads split the columns: every column block sees all tokens in
    increasing n, so each row receives its tokens in the document's order.
    dtable comes from numpy's zeros (huge pages, zeroed by the kernel as they
    are touched): numba's np.zeros wrote all V x C values first, 4 KiB pages
    faulted in one at a time.
    """
    n, c = dout.shape
    n_tasks = (c + EMB_COLS_PER_TASK - 1) // EMB_COLS_PER_TASK
    for task in prange(n_tasks):
        c0 = task * EMB_COLS_PER_TASK
        c1 = min(c, c0 + EMB_COLS_PER_TASK)
        for i in range(n):
            dst = dtable[idx[i], c0:c1]  # (c1 - c0,)
            src = dout[i, c0:c1]  # (c1 - c0,)
            for j in range(c1 - c0):  # from 0: LLVM then knows j >= 0 and vectorises
                dst[j] = dst[j] + src[j]
