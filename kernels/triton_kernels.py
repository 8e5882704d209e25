"""Triton kernels of the canonical arithmetic: products, trees and the row-wise pieces.

Launch every kernel with enable_fp_fusion=False (kernels/triton_launch.py does).
Shape legend: see kernels/__init__.py. Flat kernels index with int64 so tensors
past 2^31 elements stay addressable. Tile sizes are literals chosen by the
launchers; none of them can change a bit, because every reduction here runs in
the order docs/arithmetic.md pins, whatever the tile.
"""

from __future__ import annotations

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.triton_math import exp_f32, log_f32, tree_first, tree_last  # noqa: F401  (first: device check)


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    scale_ptr,
    M,
    N,
    K,
    sab,
    sam,
    sak,
    sbb,
    sbk,
    sbn,
    scb,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    HAS_SCALE: tl.constexpr,
    FUSED: tl.constexpr,
):
    """c[z, i, j] = dot over k of a[z, i, k] * b[z, k, j] as a left fold from +0.0 (section 2.3).

    Strides make the three layouts (nn, nt, tn) one kernel. With HAS_SCALE the
    folded value is multiplied once by scale_ptr[0] afterwards. FUSED: version
    2's fold, fma(a, b, acc) (tl.fma: one fma.rn.f32 on the GPU; the interpreter
    computes it with a correctly rounded fma too, which tests/kernels check).
    """
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    z = tl.program_id(2).to(tl.int64)
    rm = pid_m * BM + tl.arange(0, BM)  # (BM,)
    rn = pid_n * BN + tl.arange(0, BN)  # (BN,)
    a_row = a_ptr + z * sab + rm.to(tl.int64) * sam
    b_col = b_ptr + z * sbb + rn.to(tl.int64) * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)  # (BM, BN), +0.0
    for k in range(0, K):
        a_k = tl.load(a_row, mask=rm < M, other=0.0)  # (BM,) = a[z, rm, k]
        b_k = tl.load(b_col, mask=rn < N, other=0.0)  # (BN,) = b[z, k, rn]
        if FUSED:  # arithmetic version 2: one rounding per k, in k order
            acc = tl.fma(a_k[:, None], b_k[None, :], acc)
        else:  # version 1: one product and one sum per k, in k order
            acc = acc + a_k[:, None] * b_k[None, :]
        a_row += sak  # pointers step in 64 bits: no k * stride overflow
        b_col += sbk
    if HAS_SCALE:
        acc = acc * tl.load(scale_ptr)
    c = c_ptr + z * scb + rm.to(tl.int64)[:, None] * scm + rn.to(tl.int64)[None, :] * scn
    tl.store(c, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def row_tree_kernel(x_ptr, y_ptr, R, C, stride_r, BR: tl.constexpr, LOG2W: tl.constexpr, IS_MAX: tl.constexpr):
    """y[r] = psum or pmax of x[r, 0..C) over a row padded to 2^LOG2W >= C (sections 2.1, 2.2)."""
    BW: tl.constexpr = 1 << LOG2W
    rows = tl.program_id(0) * BR + tl.arange(0, BR)  # (BR,)
    cols = tl.arange(0, BW)  # (BW,)
    pad: tl.constexpr = float("-inf") if IS_MAX else -0.0  # each tree's exact identity
    ptrs = x_ptr + rows.to(tl.int64)[:, None] * stride_r + cols[None, :]
    x = tl.load(ptrs, mask=(rows[:, None] < R) & (cols[None, :] < C), other=pad)  # (BR, BW)
    tl.store(y_ptr + rows, tree_last(x, LOG2W, IS_MAX), mask=rows < R)


@triton.jit
def fold_kernel(
    x_ptr, y_ptr, W, s_a, s_n, s_w, vn, vw, lim, NOUT, LOG2G: tl.constexpr, BW: tl.constexpr, IS_MAX: tl.constexpr
):
    """The top LOG2G levels of a halving tree over axis n of a 3-d view (A, N, W).

    Element (a, n, w) lives at x_ptr + a*s_a + n*s_n + w*s_w and exists iff
    n*vn + w*vw < lim and w < W; the rest is padding. N is padded to
    NOUT * 2^LOG2G, and y (A, NOUT, W), contiguous, gets
    y[a, i, w] = tree over j of x[a, i + j*NOUT, w], which is what the first
    LOG2G levels of the halving tree leave at index i.
    """
    G: tl.constexpr = 1 << LOG2G
    pid = tl.program_id(0).to(tl.int64)  # (a, i) flattened: grid axis 0 has room for 2^31 programs
    a = pid // NOUT
    i = pid % NOUT
    w = tl.program_id(1) * BW + tl.arange(0, BW)  # (BW,)
    n = i + tl.arange(0, G) * NOUT  # (G,)
    pad: tl.constexpr = float("-inf") if IS_MAX else -0.0
    keep = ((n[:, None] * vn + w[None, :] * vw) < lim) & (w[None, :] < W)  # (G, BW)
    ptrs = x_ptr + a * s_a + n.to(tl.int64)[:, None] * s_n + w.to(tl.int64)[None, :] * s_w
    x = tl.load(ptrs, mask=keep, other=pad)  # (G, BW)
    out = y_ptr + (a * NOUT + i) * W + w
    tl.store(out, tree_first(x, LOG2G, IS_MAX), mask=w < W)


@triton.jit
def unary_kernel(x_ptr, y_ptr, numel, OP: tl.constexpr, BLOCK: tl.constexpr):
    """y = exp(x) (OP 0), log(x) (OP 1) or silu(x) = x / (1 + exp(-x)) (OP 2), elementwise."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < numel, other=0.0)
    if OP == 0:
        y = exp_f32(x)
    elif OP == 1:
        y = log_f32(x)
    else:
        y = tl.math.div_rn(x, 1.0 + exp_f32(-x))
    tl.store(y_ptr + offs, y, mask=offs < numel)


@triton.jit
def silu_backward_kernel(x_ptr, dy_ptr, dx_ptr, numel, BLOCK: tl.constexpr):
    """dx = dy * (s * (1 + x * (1 - s))) with s = 1 / (1 + exp(-x)) (section 3.3)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < numel, other=0.0)
    dy = tl.load(dy_ptr + offs, mask=offs < numel, other=0.0)
    s = tl.math.div_rn(1.0, 1.0 + exp_f32(-x))
    g = s * (1.0 + x * (1.0 - s))
    tl.store(dx_ptr + offs, dy * g, mask=offs < numel)


@triton.jit
def softmax_causal_kernel(s_ptr, p_ptr, T, BR: tl.constexpr, LOG2T: tl.constexpr):
    """p[z, t, j] = e_j / psum(e) over j <= t, e_j = exp(s[z, t, j] - pmax), +0.0 for j > t (4.1)."""
    BT: tl.constexpr = 1 << LOG2T
    z = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BR + tl.arange(0, BR)  # (BR,)
    cols = tl.arange(0, BT)  # (BT,)
    keep = (cols[None, :] <= rows[:, None]) & (rows[:, None] < T)  # (BR, BT); j <= t < T
    offs = z * T * T + rows.to(tl.int64)[:, None] * T + cols[None, :]
    s = tl.load(s_ptr + offs, mask=keep, other=float("-inf"))  # (BR, BT), -inf: max2's identity
    m = tree_last(s, LOG2T, True)  # (BR,)
    e = exp_f32(tl.where(keep, s - m[:, None], 0.0))  # masked lanes are discarded below
    total = tree_last(tl.where(keep, e, -0.0), LOG2T, False)  # (BR,); -0.0 keeps the tree
    p = tl.where(keep, tl.math.div_rn(e, total[:, None]), 0.0)
    tl.store(p_ptr + offs, p, mask=(rows[:, None] < T) & (cols[None, :] < T))


@triton.jit
def softmax_causal_backward_kernel(p_ptr, dp_ptr, ds_ptr, T, BR: tl.constexpr, LOG2T: tl.constexpr):
    """ds = p * (dp - psum(p * dp over j <= t)) for j <= t, +0.0 for j > t (section 4.1)."""
    BT: tl.constexpr = 1 << LOG2T
    z = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BR + tl.arange(0, BR)  # (BR,)
    cols = tl.arange(0, BT)  # (BT,)
    keep = (cols[None, :] <= rows[:, None]) & (rows[:, None] < T)  # (BR, BT)
    offs = z * T * T + rows.to(tl.int64)[:, None] * T + cols[None, :]
    p = tl.load(p_ptr + offs, mask=keep, other=0.0)  # (BR, BT)
    dp = tl.load(dp_ptr + offs, mask=keep, other=0.0)  # (BR, BT)
    c = tree_last(tl.where(keep, p * dp, -0.0), LOG2T, False)  # (BR,)
    ds = tl.where(keep, p * (dp - c[:, None]), 0.0)
    tl.store(ds_ptr + offs, ds, mask=(rows[:, None] < T) & (cols[None, :] < T))
