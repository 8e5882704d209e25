"""The `cpu` backend: docs/arithmetic.md in numba, parallel and vectorised, same bits.

This module is the backend's face: it checks inputs with kernels.validate
(the same checks, and so the same errors, as every backend), computes the
host scalars in float32, and calls the numba kernels of

    kernels/cpu_scalar.py       exp, log, max2 and the halving trees (inlined)
    kernels/cpu_rowtree.py      halving trees of whole rows/columns in registers (LLVM IR)
    kernels/cpu_matmul.py       packed, blocked products, k folded in order
    kernels/cpu_pack.py         the matmul's operands copied into panels
    kernels/cpu_transpose.py    16-value blocks of a transposing pack, in registers (LLVM IR)
    kernels/cpu_tile.py         the matmul's 12x32 register micro-kernel (LLVM IR)
    kernels/cpu_reduce.py       sum_rows, sum_cols, max_rows
    kernels/cpu_elementwise.py  exp, log, SiLU, AdamW over flat arrays
    kernels/cpu_nn.py           softmax, RMSNorm, cross-entropy, embedding

Every kernel is compiled with @njit(cache=True), without fastmath, so LLVM
neither contracts a*b+c into an FMA nor reassociates a sum; prange spreads
only independent outputs over threads, so the thread count changes no bit.
Shape legend: see kernels/__init__.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kernels import (
    cpu_compile_notice,  # noqa: F401  (before any kernel is called: a compile is told)
    numpy_layout,
    validate,
)
from kernels.adamw_scalars import adamw_scalars
from kernels.backend_contract import HostArray, Scalar
from kernels.cpu_attention import attention_backward_checked, attention_rows
from kernels.cpu_elementwise import adamw_into, add_flat, exp_flat, log_flat, silu_backward_flat, silu_flat
from kernels.cpu_matmul import masked_zeros, matmul_batched
from kernels.cpu_nn import (
    cross_entropy_backward_2d,
    cross_entropy_rows,
    embedding_gather,
    embedding_scatter_add,
    rmsnorm_2d,
    rmsnorm_backward_rows,
    softmax_causal_3d,
    softmax_causal_backward_3d,
)
from kernels.cpu_reduce import max_rows_2d, sum_cols_2d, sum_rows_2d

F32 = np.float32

# The layout ops between kernels (kernels/__init__.py): numpy expressions; to_device and to_host move nothing.
to_device = numpy_layout.to_device
to_host = numpy_layout.to_host
div_scalar = numpy_layout.div_scalar
mul = numpy_layout.mul
rope = numpy_layout.rope
repeat_heads = numpy_layout.repeat_heads
sum_head_groups = numpy_layout.sum_head_groups
split_heads = numpy_layout.split_heads
merge_heads = numpy_layout.merge_heads
split_tokens = numpy_layout.split_tokens

PARALLEL_ADD = 1 << 16  # elements from which add runs on every thread (numpy's runs on one; 6 vs 11 us there)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b, float32, rounded once (arrays of one shape, or 0-d values): numpy's, or add_flat for large arrays.

    The large ones are the tied embedding's gradient (head + lookup, V x C).
    """
    if a.size < PARALLEL_ADD or a.shape != b.shape or a.dtype != F32 or b.dtype != F32:
        return numpy_layout.add(a, b)
    out = np.empty(a.shape, F32)
    add_flat(np.ascontiguousarray(a).reshape(-1), np.ascontiguousarray(b).reshape(-1), out.reshape(-1))
    return out


# ------------------------------------------------------------ matrix products


def _product(a: np.ndarray, a_t: bool, b: np.ndarray, b_t: bool, m: int, n: int, fused: bool) -> np.ndarray:
    """Run the batched kernel on 2-d or 3-d operands (checked by the caller); keep a's rank."""
    if a.ndim == 2:
        product: HostArray = matmul_batched(a[None], a_t, b[None], b_t, n, fused=fused)[0]  # (M, N)
        return product
    return matmul_batched(a, a_t, b, b_t, n, fused=fused)  # (BH, M, N)


def matmul(a: np.ndarray, b: np.ndarray, *, fused: bool = False) -> np.ndarray:
    """a (M, K) @ b (K, N) -> (M, N); or batched (BH, M, K) @ (BH, K, N)."""
    m, _, n = validate.check_matmul(a, b, "nn")
    return _product(a, False, b, False, m, n, fused)


def matmul_nt(a: np.ndarray, b: np.ndarray, *, fused: bool = False) -> np.ndarray:
    """a (M, K) @ b (N, K)^T -> (M, N); or batched. bᵀ is formed while packing, exactly."""
    m, _, n = validate.check_matmul(a, b, "nt")
    return _product(a, False, b, True, m, n, fused)


def matmul_tn(a: np.ndarray, b: np.ndarray, *, fused: bool = False) -> np.ndarray:
    """a (K, M)^T @ b (K, N) -> (M, N); or batched. aᵀ is formed while packing, exactly."""
    m, _, n = validate.check_matmul(a, b, "tn")
    return _product(a, True, b, False, m, n, fused)


# ------------------------------------------------------------------ reductions


def sum_rows(x: np.ndarray) -> np.ndarray:
    """psum of each row: (R, C) -> (R,)."""
    validate.check_rows(x)
    y: HostArray = sum_rows_2d(x)  # (R,)
    return y


def sum_cols(x: np.ndarray) -> np.ndarray:
    """psum down each column (over r): (R, C) -> (C,)."""
    validate.check_rows(x)
    return sum_cols_2d(x)


def max_rows(x: np.ndarray) -> np.ndarray:
    """pmax of each row: (R, C) -> (R,). Precondition: C >= 1."""
    validate.check_rows(x, min_cols=1)
    y: HostArray = max_rows_2d(x)  # (R,)
    return y


# -------------------------------------------------------- elementary functions


def exp(x: np.ndarray) -> np.ndarray:
    """Elementwise exp (section 3.1), any shape."""
    validate.check_elementwise(x)
    y: HostArray = exp_flat(x.reshape(-1))
    return y.reshape(x.shape)


def log(x: np.ndarray) -> np.ndarray:
    """Elementwise natural log (section 3.2), any shape."""
    validate.check_elementwise(x)
    y: HostArray = log_flat(x.reshape(-1))
    return y.reshape(x.shape)


def silu(x: np.ndarray) -> np.ndarray:
    """x / (1 + exp(-x)), any shape."""
    validate.check_elementwise(x)
    y: HostArray = silu_flat(x.reshape(-1))
    return y.reshape(x.shape)


def silu_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dy * g with g = s * (1 + x * (1 - s)) and s = 1 / (1 + exp(-x)) (section 3.3); x and dy of one shape."""
    validate.check_pair(x, "x", dy, "dy")
    dx: HostArray = silu_backward_flat(x.reshape(-1), dy.reshape(-1))
    return dx.reshape(x.shape)


# ---------------------------------------------------------- composite operations


def softmax_causal(s: np.ndarray) -> np.ndarray:
    """Row softmax over j <= t of s (BH, T, T); entries j > t are +0.0."""
    validate.check_square_scores(s, "s")
    p: HostArray = softmax_causal_3d(s)  # (BH, T, T)
    return p


def softmax_causal_backward(p: np.ndarray, dp: np.ndarray) -> np.ndarray:
    """ds = p * (dp - psum(p * dp over j <= t)); +0.0 for j > t. p, dp (BH, T, T)."""
    validate.check_softmax_backward(p, dp)
    ds: HostArray = softmax_causal_backward_3d(p, dp)  # (BH, T, T)
    return ds


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, fused: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Causal attention per batch-head: q, k, v (BH, T, D) -> (o (BH, T, D), p (BH, T, T)).

    S = q kᵀ, S * scale, the causal softmax, P v, a panel of rows at a time in
    one kernel (kernels/cpu_attention.py), which leaves out the causal half of
    the products where that cannot change a bit: scores past the diagonal are
    never read by the softmax, and P's masked +0.0 times a finite v adds
    nothing to the fold.
    """
    validate.check_attention(q, k, v)
    o, p, _ = attention_rows(q, k, v, not np.isfinite(v).all(), fused)
    return o, p


def attention_backward(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, p: np.ndarray, do: np.ndarray, *, fused: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients (dq, dk, dv), each (BH, T, D), given p from attention and do (BH, T, D).

    dP = do vᵀ, dS = P * (dP - psum(P * dP)), dq = dS k * scale, dv = Pᵀ do,
    dk = dSᵀ q * scale, in one kernel (kernels/cpu_attention.py). As in
    `attention`, terms that cannot change a bit are left out: dP past the
    diagonal is never read, dS is +0.0 there, and P's masked entries are
    checked to be zeros before they are skipped (p is the caller's).
    """
    return attention_backward_checked(q, k, v, p, do, fused, lambda: bool(masked_zeros(p)))


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: Scalar) -> tuple[np.ndarray, np.ndarray]:
    """y = (x * rstd) * w with rstd = 1 / sqrt(psum(x^2) / C + eps): x (R, C), w (C,) -> (y, rstd (R,))."""
    validate.check_rmsnorm(x, w)
    y_rstd: tuple[HostArray, HostArray] = rmsnorm_2d(x, w, validate.to_float32(eps, "eps"))
    return y_rstd


def rmsnorm_backward(x: np.ndarray, w: np.ndarray, rstd: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dx (R, C), dw (C,)) of rmsnorm, given rstd (R,) from the forward pass and dy (R, C)."""
    validate.check_rmsnorm_backward(x, w, rstd, dy)
    dx: HostArray
    prod: HostArray
    dx, prod = rmsnorm_backward_rows(x, w, rstd, dy)  # (R, C) each
    return dx, sum_cols_2d(prod)


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Mean over rows of logsumexp(l_i) - l[i, t_i]: logits (N, V), targets int64 (N,) -> 0-d float32."""
    n, _ = validate.check_cross_entropy(logits, targets)
    loss: HostArray = cross_entropy_rows(logits, targets)  # (N,)
    total: np.float32 = sum_rows_2d(loss.reshape(1, n))[0]
    return np.asarray(total / F32(n), dtype=F32)


def cross_entropy_backward(logits: np.ndarray, targets: np.ndarray, dloss: Scalar) -> np.ndarray:
    """dlogits (N, V) = (e / s - onehot(t)) * (dloss / N)."""
    n, _ = validate.check_cross_entropy(logits, targets)
    g = validate.to_float32(dloss, "dloss") / F32(n)
    dlogits: HostArray = np.empty(logits.shape, np.float32)  # (N, V)
    cross_entropy_backward_2d(logits, targets, F32(g), dlogits)
    return dlogits


def embedding(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """out[n] = table[idx[n]]: table (V, C), idx int64 (N,) -> (N, C), a copy."""
    validate.check_embedding(table, idx)
    out: HostArray = embedding_gather(table, idx)  # (N, C)
    return out


def embedding_backward(idx: np.ndarray, dout: np.ndarray, vocab_size: int) -> np.ndarray:
    """dtable (V, C): +0.0, then dtable[idx[n]] += dout[n] for n in increasing order."""
    v, _, _ = validate.check_embedding_backward(idx, dout, vocab_size)
    dtable: HostArray = np.zeros((v, dout.shape[1]), np.float32)  # (V, C), +0.0
    embedding_scatter_add(idx, dout, dtable)
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
    flat = (p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1))
    p2, m2, v2 = (np.empty(p.shape, np.float32) for _ in range(3))  # numpy's: huge pages (adamw_into)
    adamw_into(*flat, k.b1, k.omb1, k.b2, k.omb2, k.ss, k.sbc2, k.decay, k.eps, *(x.reshape(-1) for x in (p2, m2, v2)))
    return p2, m2, v2


if TYPE_CHECKING:  # mypy holds this module to the contract (kernels/backend_contract.py); nothing runs here
    from kernels import cpu as _this
    from kernels.backend_contract import Backend

    _CONFORMS: Backend[HostArray] = _this
