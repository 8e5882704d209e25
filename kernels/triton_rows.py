"""Triton kernels for the elementwise parts of RMSNorm, cross-entropy, embedding and AdamW.

The reductions of these operations (row and column trees) are the generic
kernels of kernels/triton_kernels.py; what is here touches each element once,
with a row value (rstd, max, sum) broadcast along the row. All kernels are
flat over R*C elements, with r = i // C and c = i % C, in int64.
"""

from __future__ import annotations

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels.triton_math import exp_f32, log_f32  # noqa: F401  (first: device check)


@triton.jit
def _flat(numel, BLOCK: tl.constexpr):
    """This program's flat indices (BLOCK,) and their in-range mask."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    return offs, offs < numel


@triton.jit
def mul_kernel(a_ptr, b_ptr, y_ptr, numel, BLOCK: tl.constexpr):
    """y = a * b, elementwise (one rounding)."""
    offs, ok = _flat(numel, BLOCK)
    a = tl.load(a_ptr + offs, mask=ok, other=0.0)
    b = tl.load(b_ptr + offs, mask=ok, other=0.0)
    tl.store(y_ptr + offs, a * b, mask=ok)


@triton.jit
def add_kernel(a_ptr, b_ptr, y_ptr, numel, BLOCK: tl.constexpr):
    """y = a + b, elementwise (one rounding)."""
    offs, ok = _flat(numel, BLOCK)
    a = tl.load(a_ptr + offs, mask=ok, other=0.0)
    b = tl.load(b_ptr + offs, mask=ok, other=0.0)
    tl.store(y_ptr + offs, a + b, mask=ok)


@triton.jit
def rmsnorm_forward_kernel(x_ptr, w_ptr, ss_ptr, y_ptr, rstd_ptr, scal_ptr, numel, C, BLOCK: tl.constexpr):
    """rstd[r] = 1 / sqrt(ss[r] / C + eps); y = (x * rstd[r]) * w[c] (section 4.3).

    scal_ptr holds (float32(C), eps). rstd is written by the lanes with c == 0.
    """
    offs, ok = _flat(numel, BLOCK)
    r = offs // C
    c = offs % C
    cf = tl.load(scal_ptr)
    eps = tl.load(scal_ptr + 1)
    ss = tl.load(ss_ptr + r, mask=ok, other=1.0)
    rstd = tl.math.div_rn(1.0, tl.math.sqrt_rn(tl.math.div_rn(ss, cf) + eps))
    x = tl.load(x_ptr + offs, mask=ok, other=0.0)
    w = tl.load(w_ptr + c, mask=ok, other=0.0)
    tl.store(y_ptr + offs, (x * rstd) * w, mask=ok)
    tl.store(rstd_ptr + r, rstd, mask=ok & (c == 0))


@triton.jit
def rmsnorm_backward_parts_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, dyx_ptr, gx_ptr, numel, C, BLOCK: tl.constexpr):
    """With xhat = x * rstd[r] and g = dy * w[c]: dyx = dy * xhat, gx = g * xhat (section 4.3)."""
    offs, ok = _flat(numel, BLOCK)
    r = offs // C
    c = offs % C
    xhat = tl.load(x_ptr + offs, mask=ok, other=0.0) * tl.load(rstd_ptr + r, mask=ok, other=0.0)
    dy = tl.load(dy_ptr + offs, mask=ok, other=0.0)
    g = dy * tl.load(w_ptr + c, mask=ok, other=0.0)
    tl.store(dyx_ptr + offs, dy * xhat, mask=ok)
    tl.store(gx_ptr + offs, g * xhat, mask=ok)


@triton.jit
def rmsnorm_backward_dx_kernel(x_ptr, w_ptr, rstd_ptr, dy_ptr, t_ptr, dx_ptr, scal_ptr, numel, C, BLOCK: tl.constexpr):
    """dx = (g - xhat * k[r]) * rstd[r] with k[r] = t[r] / float32(C) (section 4.3)."""
    offs, ok = _flat(numel, BLOCK)
    r = offs // C
    c = offs % C
    rstd = tl.load(rstd_ptr + r, mask=ok, other=0.0)
    xhat = tl.load(x_ptr + offs, mask=ok, other=0.0) * rstd
    g = tl.load(dy_ptr + offs, mask=ok, other=0.0) * tl.load(w_ptr + c, mask=ok, other=0.0)
    k = tl.math.div_rn(tl.load(t_ptr + r, mask=ok, other=0.0), tl.load(scal_ptr))
    tl.store(dx_ptr + offs, (g - xhat * k) * rstd, mask=ok)


@triton.jit
def shifted_exp_kernel(l_ptr, m_ptr, e_ptr, numel, C, BLOCK: tl.constexpr):
    """e[r, c] = exp(l[r, c] - m[r]) (section 4.4)."""
    offs, ok = _flat(numel, BLOCK)
    r = offs // C
    l = tl.load(l_ptr + offs, mask=ok, other=0.0)
    m = tl.load(m_ptr + r, mask=ok, other=0.0)
    tl.store(e_ptr + offs, exp_f32(l - m), mask=ok)


@triton.jit
def row_loss_kernel(l_ptr, t_ptr, m_ptr, s_ptr, loss_ptr, N, V, BLOCK: tl.constexpr):
    """loss[i] = (m[i] + log(s[i])) - l[i, t[i]] (section 4.4)."""
    i, ok = _flat(N, BLOCK)
    tgt = tl.load(t_ptr + i, mask=ok, other=0)
    lt = tl.load(l_ptr + i * V + tgt, mask=ok, other=0.0)
    lse = tl.load(m_ptr + i, mask=ok, other=0.0) + log_f32(tl.load(s_ptr + i, mask=ok, other=1.0))
    tl.store(loss_ptr + i, lse - lt, mask=ok)


@triton.jit
def divide_kernel(x_ptr, y_ptr, d_ptr, numel, BLOCK: tl.constexpr):
    """y = x / d_ptr[0], correctly rounded."""
    offs, ok = _flat(numel, BLOCK)
    x = tl.load(x_ptr + offs, mask=ok, other=0.0)
    tl.store(y_ptr + offs, tl.math.div_rn(x, tl.load(d_ptr)), mask=ok)


@triton.jit
def cross_entropy_grad_kernel(e_ptr, s_ptr, t_ptr, dl_ptr, g_ptr, numel, C, BLOCK: tl.constexpr):
    """dl[i, j] = (e[i, j] / s[i] - (1 if j == t[i] else 0)) * g (section 4.4)."""
    offs, ok = _flat(numel, BLOCK)
    r = offs // C
    c = offs % C
    q = tl.math.div_rn(tl.load(e_ptr + offs, mask=ok, other=0.0), tl.load(s_ptr + r, mask=ok, other=1.0))
    hot = tl.where(c == tl.load(t_ptr + r, mask=ok, other=0), 1.0, 0.0)
    tl.store(dl_ptr + offs, (q - hot) * tl.load(g_ptr), mask=ok)


@triton.jit
def gather_rows_kernel(table_ptr, idx_ptr, out_ptr, numel, C, BLOCK: tl.constexpr):
    """out[n, c] = table[idx[n], c] (section 4.5), a copy."""
    offs, ok = _flat(numel, BLOCK)
    n = offs // C
    c = offs % C
    row = tl.load(idx_ptr + n, mask=ok, other=0)
    tl.store(out_ptr + offs, tl.load(table_ptr + row * C + c, mask=ok, other=0.0), mask=ok)


@triton.jit
def scatter_rows_kernel(dout_ptr, order_ptr, start_ptr, dtable_ptr, C, BC: tl.constexpr):
    """dtable[v, cols] = +0.0 + dout[n0] + dout[n1] + ... over v's tokens in increasing n (4.5).

    order[start[v]:start[v + 1]] lists the tokens n with idx[n] == v in
    increasing n (a stable sort), so each row gets its own left fold.
    """
    v = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)  # (BC,)
    ok = cols < C
    lo = tl.load(start_ptr + v)
    hi = tl.load(start_ptr + v + 1)
    acc = tl.zeros((BC,), dtype=tl.float32)  # (BC,), +0.0
    for j in range(lo, hi):
        n = tl.load(order_ptr + j)
        acc = acc + tl.load(dout_ptr + n * C + cols, mask=ok, other=0.0)
    tl.store(dtable_ptr + v * C + cols, acc, mask=ok)


@triton.jit
def adamw_kernel(p_ptr, g_ptr, m_ptr, v_ptr, p2_ptr, m2_ptr, v2_ptr, scal_ptr, numel, BLOCK: tl.constexpr):
    """One AdamW update (section 4.6).

    scal_ptr holds the host scalars (beta1, 1 - beta1, beta2, 1 - beta2, ss, sbc2, eps, decay).
    """
    offs, ok = _flat(numel, BLOCK)
    b1 = tl.load(scal_ptr)
    omb1 = tl.load(scal_ptr + 1)
    b2 = tl.load(scal_ptr + 2)
    omb2 = tl.load(scal_ptr + 3)
    ss = tl.load(scal_ptr + 4)
    sbc2 = tl.load(scal_ptr + 5)
    eps = tl.load(scal_ptr + 6)
    decay = tl.load(scal_ptr + 7)
    p = tl.load(p_ptr + offs, mask=ok, other=0.0)
    g = tl.load(g_ptr + offs, mask=ok, other=0.0)
    m = tl.load(m_ptr + offs, mask=ok, other=0.0)
    v = tl.load(v_ptr + offs, mask=ok, other=0.0)
    m2 = b1 * m + omb1 * g
    v2 = b2 * v + omb2 * (g * g)
    den = tl.math.div_rn(tl.math.sqrt_rn(v2), sbc2) + eps
    p2 = p * decay - ss * tl.math.div_rn(m2, den)
    tl.store(p2_ptr + offs, p2, mask=ok)
    tl.store(m2_ptr + offs, m2, mask=ok)
    tl.store(v2_ptr + offs, v2, mask=ok)


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, numel, T, D, BLOCK: tl.constexpr):
    """Rotary positions on x (BH, T, D) (section 4.7): y1 = x1 c - x2 s, y2 = x2 c + x1 s, halves of a row.

    cos and sin are (T, D/2); an element of the first half pairs with the one D/2 after it.
    """
    offs, ok = _flat(numel, BLOCK)
    half = D // 2
    col = offs % D
    t = (offs // D) % T
    first = col < half
    i = tl.where(first, col, col - half)
    partner = tl.where(first, offs + half, offs - half)
    x = tl.load(x_ptr + offs, mask=ok, other=0.0)
    xp = tl.load(x_ptr + partner, mask=ok, other=0.0)
    c = tl.load(cos_ptr + t * half + i, mask=ok, other=0.0)
    s = tl.load(sin_ptr + t * half + i, mask=ok, other=0.0)
    tl.store(y_ptr + offs, tl.where(first, x * c - xp * s, x * c + xp * s), mask=ok)
