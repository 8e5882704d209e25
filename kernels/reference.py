"""The reference backend: docs/arithmetic.md written out in numpy float32.

Slow and obviously right. Every value is produced by a numpy float32
elementwise operation (+ - * / sqrt, comparisons, selects, bit casts), one
rounding each; loops run in the document's order and are vectorised only
across independent outputs (rows, columns, matrix entries). No numpy
reduction, dot, matmul or transcendental ever produces a returned value.
Shape legend: see kernels/__init__.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from kernels import constants as K
from kernels import numpy_layout, validate
from kernels.adamw_scalars import adamw_scalars
from kernels.backend_contract import HostArray, Scalar
from kernels.exact_fma import fused_fold

F32 = np.float32

# The layout ops between kernels (kernels/__init__.py): numpy expressions; to_device and to_host move nothing.
to_device = numpy_layout.to_device
to_host = numpy_layout.to_host
add = numpy_layout.add
div_scalar = numpy_layout.div_scalar
mul = numpy_layout.mul
rope = numpy_layout.rope
repeat_heads = numpy_layout.repeat_heads
sum_head_groups = numpy_layout.sum_head_groups
split_heads = numpy_layout.split_heads
merge_heads = numpy_layout.merge_heads
split_tokens = numpy_layout.split_tokens


def _next_pow2(n: int) -> int:
    """P2(n): the smallest power of two >= n (P2(0) = P2(1) = 1)."""
    return 1 << max(n - 1, 0).bit_length()


def _pow2(k: np.ndarray) -> np.ndarray:
    """2^k as float32, built from exponent bits. Precondition: -126 <= k <= 127."""
    return ((k.astype(np.int32) + np.int32(127)) << np.int32(23)).view(np.float32)


def _max2(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """max2(a, b) = NaN if either is NaN; b if b > a; a otherwise (section 2.2)."""
    return np.where((b > a) | np.isnan(b), b, a)


def _tree_last(s: np.ndarray, combine: Callable[[HostArray, HostArray], HostArray]) -> np.ndarray:
    """Fold the last axis (length a power of two) by the halving tree; return s[..., 0].

    Precondition: s is a fresh padded array (it is overwritten).
    """
    w = s.shape[-1] // 2
    with np.errstate(all="ignore"):  # inf - inf and the like are part of the spec
        while w >= 1:
            s[..., :w] = combine(s[..., :w], s[..., w : 2 * w])  # pairs (i, i + w)
            w //= 2
    return s[..., 0].copy()


def _psum_last(x: np.ndarray) -> np.ndarray:
    """psum over the last axis of x, any leading shape (section 2.1)."""
    n = x.shape[-1]
    if n == 0:
        return np.zeros(x.shape[:-1], dtype=F32)
    s = np.full(x.shape[:-1] + (_next_pow2(n),), K.NEG_ZERO, dtype=F32)  # -0.0 is the identity of +
    s[..., :n] = x
    return _tree_last(s, np.add)


def _pmax_last(x: np.ndarray) -> np.ndarray:
    """pmax over the last axis of x (length >= 1), any leading shape (section 2.2)."""
    n = x.shape[-1]
    s = np.full(x.shape[:-1] + (_next_pow2(n),), K.NEG_INF, dtype=F32)
    s[..., :n] = x
    return _tree_last(s, _max2)


# ---------------------------------------------------------------- reductions


def sum_rows(x: np.ndarray) -> np.ndarray:
    """psum of each row: (R, C) -> (R,)."""
    validate.check_rows(x)
    return _psum_last(x)


def sum_cols(x: np.ndarray) -> np.ndarray:
    """psum down each column (over r): (R, C) -> (C,)."""
    validate.check_rows(x)
    return _psum_last(np.ascontiguousarray(x.T))  # the transpose is a copy, exact


def max_rows(x: np.ndarray) -> np.ndarray:
    """pmax of each row: (R, C) -> (R,). Precondition: C >= 1."""
    validate.check_rows(x, min_cols=1)
    return _pmax_last(x)


def _fold(at: np.ndarray, b: np.ndarray, fused: bool) -> np.ndarray:
    """Left fold over k of at[.., k, m] * b[.., k, n], starting from +0.0 (section 2.3): (.., M, N).

    Precondition: at (.., K, M) and b (.., K, N) are validated float32 (`at` is the first matrix with
    its k axis before its m axis, a view). Version 1 (fused False): acc + (a * b), two roundings per k,
    into two arrays made once. Version 2 (fused True): fma(a, b, acc), one rounding per k
    (kernels/exact_fma.fused_fold).
    """
    if fused:
        return fused_fold(at, b)  # fma(a, b, acc) per k, exactly
    *lead, k, m = at.shape
    acc = np.zeros((*lead, m, b.shape[-1]), dtype=F32)
    product = np.empty_like(acc)
    a3 = np.moveaxis(at, -2, 0)[..., :, None]  # (K, .., M, 1)
    b3 = np.moveaxis(b, -2, 0)[..., None, :]  # (K, .., 1, N)
    with np.errstate(all="ignore"):  # overflow and inf * 0 are part of the spec
        for i in range(k):
            np.multiply(a3[i], b3[i], out=product)  # one product per (m, n)
            np.add(acc, product, out=acc)  # one sum
    return acc


def matmul(a: np.ndarray, b: np.ndarray, *, fused: bool = False) -> np.ndarray:
    """a (M, K) @ b (K, N) -> (M, N); or batched (BH, M, K) @ (BH, K, N)."""
    validate.check_matmul(a, b, "nn")
    return _fold(np.swapaxes(a, -1, -2), b, fused)


def matmul_nt(a: np.ndarray, b: np.ndarray, *, fused: bool = False) -> np.ndarray:
    """a (M, K) @ b (N, K)^T -> (M, N); or batched."""
    validate.check_matmul(a, b, "nt")
    return _fold(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2), fused)


def matmul_tn(a: np.ndarray, b: np.ndarray, *, fused: bool = False) -> np.ndarray:
    """a (K, M)^T @ b (K, N) -> (M, N); or batched."""
    validate.check_matmul(a, b, "tn")
    return _fold(a, b, fused)


# ------------------------------------------------------ elementary functions


def _exp(x: np.ndarray) -> np.ndarray:
    """exp of section 3.1 on a float32 array, unchecked."""
    with np.errstate(all="ignore"):
        inside = (x >= K.EXP_LO) & (x <= K.EXP_HI)
        xc = np.where(inside, x, K.ZERO)  # out-of-range lanes are replaced below
        t = xc * K.LOG2E
        n = (t + K.SHIFTER) - K.SHIFTER  # round to nearest integer, ties to even
        r = (xc - n * K.LN2_HI) - n * K.LN2_LO
        q = np.full(x.shape, K.C7, dtype=F32)
        for c in (K.C6, K.C5, K.C4, K.C3, K.C2):
            q = q * r + c  # two roundings, never fused
        p = K.ONE + (r + (r * r) * q)  # 1 + (r + r^2 q): monotone in r, unlike Horner through 1.0
        ni = n.astype(np.int32)
        n1 = ni >> np.int32(1)  # arithmetic shift = floor(n / 2)
        n2 = ni - n1
        y = (p * _pow2(n1)) * _pow2(n2)  # first exact, second rounds once
        y = np.where(x > K.EXP_HI, K.POS_INF, y)
        y = np.where(x < K.EXP_LO, K.ZERO, y)
        return np.where(np.isnan(x), x, y).astype(F32, copy=False)


def _log(x: np.ndarray) -> np.ndarray:
    """log of section 3.2 on a float32 array, unchecked."""
    with np.errstate(all="ignore"):
        finite_pos = (x > K.ZERO) & (x < K.POS_INF)
        xc = np.where(finite_pos, x, K.ONE)  # special lanes are replaced below
        sub = xc < K.MIN_NORMAL
        xs = np.where(sub, xc * K.TWO23, xc)  # exact rescale of subnormals
        bits = xs.view(np.int32)  # np.where made xs fresh and contiguous
        e = ((bits >> np.int32(23)) & np.int32(0xFF)) - np.int32(127) - np.where(sub, np.int32(23), np.int32(0))
        m = ((bits & np.int32(0x7FFFFF)) | np.int32(0x3F800000)).view(np.float32)  # m in [1, 2)
        big = m > K.SQRT2
        m = np.where(big, m * K.HALF, m)
        e = e + big.astype(np.int32)
        f = m - K.ONE  # exact
        s = f / (K.TWO + f)
        z = s * s
        q = np.full(x.shape, K.L11, dtype=F32)
        for c in (K.L9, K.L7, K.L5, K.L3):
            q = q * z + c
        q = q * z
        u = s + s
        lm = u + u * q
        ef = e.astype(F32)  # |e| <= 149: exact
        y = ef * K.LN2_HI + (ef * K.LN2_LO + lm)
        y = np.where(x == K.POS_INF, K.POS_INF, y)
        y = np.where(x == K.ZERO, K.NEG_INF, y)  # either sign of zero
        return np.where(np.isnan(x) | (x < K.ZERO), np.float32(np.nan), y).astype(F32, copy=False)


def exp(x: np.ndarray) -> np.ndarray:
    """Elementwise exp (section 3.1), any shape."""
    validate.check_elementwise(x)
    return _exp(x)


def log(x: np.ndarray) -> np.ndarray:
    """Elementwise natural log (section 3.2), any shape."""
    validate.check_elementwise(x)
    return _log(x)


def silu(x: np.ndarray) -> np.ndarray:
    """x / (1 + exp(-x)), any shape."""
    validate.check_elementwise(x)
    with np.errstate(all="ignore"):
        return np.asarray(x / (K.ONE + _exp(-x)), dtype=F32)  # 0-d stays an array


def silu_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dy * g with g = s * (1 + x * (1 - s)) and s = 1 / (1 + exp(-x)) (section 3.3); x and dy of one shape."""
    validate.check_pair(x, "x", dy, "dy")
    with np.errstate(all="ignore"):
        s = K.ONE / (K.ONE + _exp(-x))
        g = s * (K.ONE + x * (K.ONE - s))
        return np.asarray(dy * g, dtype=F32)  # 0-d stays an array


# -------------------------------------------------------- composite operations


def _causal_mask(t: int) -> np.ndarray:
    """(T, T) bool, True where j <= t (the entries that exist)."""
    return np.tri(t, t, dtype=bool)


def softmax_causal(s: np.ndarray) -> np.ndarray:
    """Row softmax over j <= t of s (BH, T, T); entries j > t are +0.0."""
    _, t = validate.check_square_scores(s, "s")
    if t == 0:
        return s.copy()
    keep = _causal_mask(t)  # (T, T)
    with np.errstate(all="ignore"):
        m = _pmax_last(np.where(keep, s, K.NEG_INF))  # (BH, T); -inf padding is max2's identity
        e = _exp(s - m[..., None])  # (BH, T, T)
        total = _psum_last(np.where(keep, e, K.NEG_ZERO))  # (BH, T); -0.0 keeps the tree
        return np.where(keep, e / total[..., None], K.ZERO)


def softmax_causal_backward(p: np.ndarray, dp: np.ndarray) -> np.ndarray:
    """ds = p * (dp - psum(p * dp over j <= t)); +0.0 for j > t. p, dp (BH, T, T)."""
    _, t = validate.check_softmax_backward(p, dp)
    if t == 0:
        return p.copy()
    keep = _causal_mask(t)  # (T, T)
    with np.errstate(all="ignore"):
        c = _psum_last(np.where(keep, p * dp, K.NEG_ZERO))  # (BH, T)
        return np.where(keep, p * (dp - c[..., None]), K.ZERO)


def _attention_scale(d: int) -> np.float32:
    """1 / sqrt(float32(D)), rounded twice on the host."""
    scale: np.float32 = K.ONE / np.sqrt(F32(d))
    return scale


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, fused: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Causal attention per batch-head: q, k, v (BH, T, D) -> (o (BH, T, D), p (BH, T, T))."""
    _, _, d = validate.check_attention(q, k, v)
    with np.errstate(all="ignore"):
        s = matmul_nt(q, k, fused=fused) * _attention_scale(d)  # (BH, T, T)
        p = softmax_causal(s)  # (BH, T, T)
        return matmul(p, v, fused=fused), p  # (BH, T, D)


def attention_backward(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, p: np.ndarray, do: np.ndarray, *, fused: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients (dq, dk, dv), each (BH, T, D), given p from attention and do (BH, T, D)."""
    _, _, d = validate.check_attention_backward(q, k, v, p, do)
    scale = _attention_scale(d)
    with np.errstate(all="ignore"):
        dp = matmul_nt(do, v, fused=fused)  # (BH, T, T)
        dv = matmul_tn(p, do, fused=fused)  # (BH, T, D)
        ds = softmax_causal_backward(p, dp)  # (BH, T, T)
        dq = matmul(ds, k, fused=fused) * scale  # (BH, T, D)
        dk = matmul_tn(ds, q, fused=fused) * scale  # (BH, T, D)
    return dq, dk, dv


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: Scalar) -> tuple[np.ndarray, np.ndarray]:
    """y = (x * rstd) * w with rstd = 1 / sqrt(psum(x^2) / C + eps): x (R, C), w (C,) -> (y, rstd (R,))."""
    _, c = validate.check_rmsnorm(x, w)
    eps32 = validate.to_float32(eps, "eps")
    with np.errstate(all="ignore"):
        ss = _psum_last(x * x)  # (R,)
        rstd = K.ONE / np.sqrt(ss / F32(c) + eps32)  # (R,)
        y = (x * rstd[:, None]) * w[None, :]  # (R, C)
    return y, rstd


def rmsnorm_backward(x: np.ndarray, w: np.ndarray, rstd: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dx (R, C), dw (C,)) of rmsnorm, given rstd (R,) from the forward pass and dy (R, C)."""
    _, c = validate.check_rmsnorm_backward(x, w, rstd, dy)
    with np.errstate(all="ignore"):
        xhat = x * rstd[:, None]  # (R, C), the forward's bits
        dw = _psum_last(np.ascontiguousarray((dy * xhat).T))  # (C,), over r
        g = dy * w[None, :]  # (R, C)
        kr = _psum_last(g * xhat) / F32(c)  # (R,)
        dx = (g - xhat * kr[:, None]) * rstd[:, None]  # (R, C)
    return dx, dw


def _softmax_parts(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m (N,), e (N, V), s (N,)) of section 4.4."""
    m = _pmax_last(logits)  # (N,)
    e = _exp(logits - m[:, None])  # (N, V)
    return m, e, _psum_last(e)


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Mean over rows of logsumexp(l_i) - l[i, t_i]: logits (N, V), targets int64 (N,) -> 0-d float32."""
    n, _ = validate.check_cross_entropy(logits, targets)
    with np.errstate(all="ignore"):
        m, _, s = _softmax_parts(logits)
        lse = m + _log(s)  # (N,)
        loss = lse - logits[np.arange(n), targets]  # (N,)
        return np.asarray(_psum_last(loss) / F32(n), dtype=F32)


def cross_entropy_backward(logits: np.ndarray, targets: np.ndarray, dloss: Scalar) -> np.ndarray:
    """dlogits (N, V) = (e / s - onehot(t)) * (dloss / N)."""
    n, v = validate.check_cross_entropy(logits, targets)
    g = validate.to_float32(dloss, "dloss") / F32(n)
    with np.errstate(all="ignore"):
        _, e, s = _softmax_parts(logits)
        onehot = np.zeros((n, v), dtype=F32)  # (N, V)
        onehot[np.arange(n), targets] = K.ONE
        dlogits: HostArray = (e / s[:, None] - onehot) * g  # (N, V)
        return dlogits


def embedding(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """out[n] = table[idx[n]]: table (V, C), idx int64 (N,) -> (N, C), a copy."""
    validate.check_embedding(table, idx)
    out: HostArray = table[idx]  # (N, C)
    return out


def embedding_backward(idx: np.ndarray, dout: np.ndarray, vocab_size: int) -> np.ndarray:
    """dtable (V, C): +0.0, then dtable[idx[n]] += dout[n] for n in increasing order."""
    v, c, n = validate.check_embedding_backward(idx, dout, vocab_size)
    dtable = np.zeros((v, c), dtype=F32)
    # Round r adds every token that is the r-th occurrence of its id, so each
    # row still receives its tokens in increasing n while a round's rows are distinct.
    order = np.argsort(idx, kind="stable")  # (N,)
    sorted_idx = idx[order]
    first = np.searchsorted(sorted_idx, sorted_idx, side="left")  # start of each id's run
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - first
    for r in range(int(rank.max()) + 1 if n else 0):
        tok = np.flatnonzero(rank == r)  # increasing n, distinct ids
        dtable[idx[tok]] = dtable[idx[tok]] + dout[tok]
    return dtable


def adamw(
    p: np.ndarray,
    g: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    step: int,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    eps: Scalar,
    weight_decay: Scalar,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One AdamW update (section 4.6) on p, g, m, v of one shape; returns (p', m', v')."""
    step = validate.check_adamw(p, g, m, v, step)
    k = adamw_scalars(step, lr, beta1, beta2, eps, weight_decay)
    with np.errstate(all="ignore"):
        m2 = k.b1 * m + k.omb1 * g
        v2 = k.b2 * v + k.omb2 * (g * g)
        den = np.sqrt(v2) / k.sbc2 + k.eps
        p2 = p * k.decay - k.ss * (m2 / den)
    return p2, m2, v2


if TYPE_CHECKING:  # mypy holds this module to the contract (kernels/backend_contract.py); nothing runs here
    from kernels import reference as _this
    from kernels.backend_contract import Backend

    _CONFORMS: Backend[HostArray] = _this
