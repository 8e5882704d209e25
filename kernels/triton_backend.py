"""The Triton backend: docs/arithmetic.md on the GPU, bitwise equal to kernels.reference.

Every function of kernels/__init__.py's list is here. Each accepts numpy
float32 arrays (copied to the device, result copied back as numpy) or torch
tensors already on the backend's device (kept there; results are torch
tensors), but not a mix: kernels/triton_io.py checks inputs with
kernels.validate, so this backend refuses exactly what the others refuse.

Keeping a whole step on the device: the ops between kernels (to_device,
to_host, add, div_scalar, split_heads, merge_heads, split_tokens) are in
kernels/triton_layout.py and re-exported here; index checks read a range
noted on upload, never the device values. Host scalars (eps, 1/N, AdamW's)
go up as small vectors that kernels.triton_launch keeps by value, so a
repeated one is uploaded once. Nothing else copies between host and device
for tensor inputs (tests/engine/test_device_residency.py counts).

Importing needs CUDA or TRITON_INTERPRET=1 (set before the import); without
either, the import raises ImportError("triton backend needs CUDA or
TRITON_INTERPRET=1 ...").

How the orders are kept (the kernels are in kernels/triton_kernels.py and
kernels/triton_rows.py, the launchers in kernels/triton_launch.py):
products fold k one step at a time into a (64, 64) tile; row trees hold a
padded row of up to 2^10 in one block and halve it in registers, and wider
rows (and all column trees) first run fold passes that do the top levels of
the same tree, 3 levels a pass; composite ops (RMSNorm, cross-entropy,
attention) are sequences of these kernels and elementwise ones.

Limits: a causal-softmax row (T) is held whole in one block, so very long
rows compile to large kernels (T <= 4096 is the intended range); a batch of
products or softmaxes has at most 65535 elements (a CUDA grid axis).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernels.triton_math import MODE  # first: raises ImportError without a device

if MODE == "compile":
    raise ImportError("triton backend needs CUDA or TRITON_INTERPRET=1 (P2PAUDIT_TRITON_COMPILE_ONLY=1 only compiles)")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernels import constants as K  # noqa: E402
from kernels import triton_io as io  # noqa: E402
from kernels import triton_kernels as tk  # noqa: E402
from kernels import triton_launch as L  # noqa: E402
from kernels import (
    triton_layout,  # noqa: E402
    validate,  # noqa: E402
)
from kernels import triton_rows as tr  # noqa: E402
from kernels.adamw_scalars import adamw_scalars  # noqa: E402
from kernels.backend_contract import Scalar  # noqa: E402
from kernels.triton_io import Arr  # noqa: E402

F32 = np.float32
SCATTER_BC = 128  # columns per program of the embedding gradient

# The ops between kernels (kernels/__init__.py): on device tensors, kernels/triton_layout.py.
to_device = triton_layout.to_device
to_host = triton_layout.to_host
add = triton_layout.add
div_scalar = triton_layout.div_scalar
mul = triton_layout.mul
rope = triton_layout.rope
repeat_heads = triton_layout.repeat_heads
sum_head_groups = triton_layout.sum_head_groups
split_heads = triton_layout.split_heads
merge_heads = triton_layout.merge_heads
split_tokens = triton_layout.split_tokens

# ---------------------------------------------------------------- reductions


def sum_rows(x: Arr) -> Arr:
    """psum of each row: (R, C) -> (R,)."""
    io.torch_mode(x)  # refuses a mix; results come back in the kind of the first array
    validate.check_rows(io.checkable(x, "x"))
    return io.to_caller(L.reduce_rows(io.device_tensor(x), is_max=False), x)


def sum_cols(x: Arr) -> Arr:
    """psum down each column: (R, C) -> (C,)."""
    io.torch_mode(x)  # refuses a mix; results come back in the kind of the first array
    validate.check_rows(io.checkable(x, "x"))
    return io.to_caller(L.reduce_cols(io.device_tensor(x)), x)


def max_rows(x: Arr) -> Arr:
    """pmax of each row: (R, C) -> (R,), C >= 1."""
    io.torch_mode(x)  # refuses a mix; results come back in the kind of the first array
    validate.check_rows(io.checkable(x, "x"), min_cols=1)
    return io.to_caller(L.reduce_rows(io.device_tensor(x), is_max=True), x)


def _matmul(a: Arr, b: Arr, layout: str, fused: bool) -> Arr:
    """Check, run and return the product of `layout` on 2-d or batched 3-d operands."""
    io.torch_mode(a, b)  # refuses a mix; results come back in the kind of the first array
    validate.check_matmul(io.checkable(a, "a"), io.checkable(b, "b"), layout)
    ta, tb = io.device_tensor(a), io.device_tensor(b)
    if ta.dim() == 2:
        return io.to_caller(L.matmul(ta[None], tb[None], layout, fused=fused)[0], a)
    return io.to_caller(L.matmul(ta, tb, layout, fused=fused), a)


def matmul(a: Arr, b: Arr, *, fused: bool = False) -> Arr:
    """a (M, K) @ b (K, N) -> (M, N); or batched (BH, M, K) @ (BH, K, N)."""
    return _matmul(a, b, "nn", fused)


def matmul_nt(a: Arr, b: Arr, *, fused: bool = False) -> Arr:
    """a (M, K) @ b (N, K)^T -> (M, N); or batched."""
    return _matmul(a, b, "nt", fused)


def matmul_tn(a: Arr, b: Arr, *, fused: bool = False) -> Arr:
    """a (K, M)^T @ b (K, N) -> (M, N); or batched."""
    return _matmul(a, b, "tn", fused)


# ------------------------------------------------------ elementary functions


def _unary(x: Arr, op: int) -> Arr:
    """exp (0), log (1) or silu (2) of a float32 array of any shape."""
    io.torch_mode(x)  # refuses a mix; results come back in the kind of the first array
    validate.check_elementwise(io.checkable(x, "x"))
    tx = io.device_tensor(x)
    y = torch.empty_like(tx)
    L.launch(tk.unary_kernel, L.flat_grid(tx.numel()), tx, y, tx.numel(), OP=op, BLOCK=L.FLAT_BLOCK)
    return io.to_caller(y, x)


def exp(x: Arr) -> Arr:
    """Elementwise exp (section 3.1), any shape."""
    return _unary(x, 0)


def log(x: Arr) -> Arr:
    """Elementwise natural log (section 3.2), any shape."""
    return _unary(x, 1)


def silu(x: Arr) -> Arr:
    """x / (1 + exp(-x)), any shape."""
    return _unary(x, 2)


def silu_backward(x: Arr, dy: Arr) -> Arr:
    """dy * g with g = s * (1 + x * (1 - s)) and s = 1 / (1 + exp(-x)) (section 3.3); x and dy of one shape."""
    io.torch_mode(x, dy)  # refuses a mix; results come back in the kind of the first array
    validate.check_pair(io.checkable(x, "x"), "x", io.checkable(dy, "dy"), "dy")
    tx, tdy = io.device_tensor(x), io.device_tensor(dy)
    dx = torch.empty_like(tx)
    L.launch(tk.silu_backward_kernel, L.flat_grid(tx.numel()), tx, tdy, dx, tx.numel(), BLOCK=L.FLAT_BLOCK)
    return io.to_caller(dx, x)


# -------------------------------------------------------- composite operations


def _softmax_launch(kernel: L.JitKernel, ins: list[torch.Tensor], bh: int, t: int) -> torch.Tensor:
    """Run a causal-softmax row kernel over (BH, T, T) inputs; returns its (BH, T, T) output."""
    out = torch.empty((bh, t, t), dtype=torch.float32, device=ins[0].device)
    log2t = L.log2_p2(t)
    br = L.rows_per_block(log2t)
    L.launch(kernel, (L.cdiv(t, br), bh), *ins, out, t, BR=br, LOG2T=log2t)
    return out


def _softmax(s: torch.Tensor) -> torch.Tensor:
    """softmax_causal on a checked device tensor (BH, T, T)."""
    bh, t = s.shape[0], s.shape[1]
    return _softmax_launch(tk.softmax_causal_kernel, [s], bh, t)


def _softmax_backward(p: torch.Tensor, dp: torch.Tensor) -> torch.Tensor:
    """softmax_causal_backward on checked device tensors (BH, T, T)."""
    bh, t = p.shape[0], p.shape[1]
    return _softmax_launch(tk.softmax_causal_backward_kernel, [p, dp], bh, t)


def softmax_causal(s: Arr) -> Arr:
    """Row softmax over j <= t of s (BH, T, T); entries j > t are +0.0."""
    io.torch_mode(s)  # refuses a mix; results come back in the kind of the first array
    validate.check_square_scores(io.checkable(s, "s"), "s")
    return io.to_caller(_softmax(io.device_tensor(s)), s)


def softmax_causal_backward(p: Arr, dp: Arr) -> Arr:
    """ds = p * (dp - psum(p * dp over j <= t)); +0.0 for j > t. p, dp (BH, T, T)."""
    io.torch_mode(p, dp)  # refuses a mix; results come back in the kind of the first array
    validate.check_softmax_backward(io.checkable(p, "p"), io.checkable(dp, "dp"))
    return io.to_caller(_softmax_backward(io.device_tensor(p), io.device_tensor(dp)), p)


def _attention_scale(d: int) -> torch.Tensor:
    """1 / sqrt(float32(D)), rounded twice on the host, as a device scalar."""
    return L.device_scalars(K.ONE / np.sqrt(F32(d)))


def attention(q: Arr, k: Arr, v: Arr, *, fused: bool = False) -> tuple[Arr, Arr]:
    """Causal attention per batch-head: q, k, v (BH, T, D) -> (o (BH, T, D), p (BH, T, T))."""
    io.torch_mode(q, k, v)  # refuses a mix; results come back in the kind of the first array
    _, _, d = validate.check_attention(io.checkable(q, "q"), io.checkable(k, "k"), io.checkable(v, "v"))
    tq, tk_, tv = io.device_tensor(q), io.device_tensor(k), io.device_tensor(v)
    s = L.matmul(tq, tk_, "nt", scale=_attention_scale(d), fused=fused)  # (BH, T, T)
    p = _softmax(s)  # (BH, T, T)
    o = L.matmul(p, tv, "nn", fused=fused)  # (BH, T, D)
    return io.to_caller(o, q), io.to_caller(p, q)


def attention_backward(q: Arr, k: Arr, v: Arr, p: Arr, do: Arr, *, fused: bool = False) -> tuple[Arr, Arr, Arr]:
    """Gradients (dq, dk, dv), each (BH, T, D), given p from attention and do (BH, T, D)."""
    io.torch_mode(q, k, v, p, do)  # refuses a mix; results come back in the kind of the first array
    names = ("q", "k", "v", "p", "do")
    _, _, d = validate.check_attention_backward(*(io.checkable(x, n) for x, n in zip((q, k, v, p, do), names)))
    tq, tk_, tv, tp, tdo = (io.device_tensor(x) for x in (q, k, v, p, do))
    scale = _attention_scale(d)
    dp = L.matmul(tdo, tv, "nt", fused=fused)  # (BH, T, T)
    dv = L.matmul(tp, tdo, "tn", fused=fused)  # (BH, T, D)
    ds = _softmax_backward(tp, dp)  # (BH, T, T)
    dq = L.matmul(ds, tk_, "nn", scale=scale, fused=fused)  # (BH, T, D)
    dk = L.matmul(ds, tq, "tn", scale=scale, fused=fused)  # (BH, T, D)
    return io.to_caller(dq, q), io.to_caller(dk, q), io.to_caller(dv, q)


def _mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a * b elementwise on device tensors of one shape."""
    y = torch.empty_like(a)
    L.launch(tr.mul_kernel, L.flat_grid(a.numel()), a, b, y, a.numel(), BLOCK=L.FLAT_BLOCK)
    return y


def rmsnorm(x: Arr, w: Arr, eps: Scalar) -> tuple[Arr, Arr]:
    """y = (x * rstd) * w with rstd = 1 / sqrt(psum(x^2) / C + eps): x (R, C), w (C,) -> (y, rstd (R,))."""
    io.torch_mode(x, w)  # refuses a mix; results come back in the kind of the first array
    r, c = validate.check_rmsnorm(io.checkable(x, "x"), io.checkable(w, "w"))
    eps32 = validate.to_float32(eps, "eps")
    tx, tw = io.device_tensor(x), io.device_tensor(w)
    ss = L.reduce_rows(_mul(tx, tx), is_max=False)  # (R,)
    y = torch.empty_like(tx)
    rstd = torch.empty(r, dtype=torch.float32, device=tx.device)
    L.launch(
        tr.rmsnorm_forward_kernel,
        L.flat_grid(r * c),
        tx,
        tw,
        ss,
        y,
        rstd,
        L.device_scalars(F32(c), eps32),
        r * c,
        c,
        BLOCK=L.FLAT_BLOCK,
    )
    return io.to_caller(y, x), io.to_caller(rstd, x)


def rmsnorm_backward(x: Arr, w: Arr, rstd: Arr, dy: Arr) -> tuple[Arr, Arr]:
    """(dx (R, C), dw (C,)) of rmsnorm, given rstd (R,) from the forward pass and dy (R, C)."""
    io.torch_mode(x, w, rstd, dy)  # refuses a mix; results come back in the kind of the first array
    r, c = validate.check_rmsnorm_backward(
        *(io.checkable(a, n) for a, n in ((x, "x"), (w, "w"), (rstd, "rstd"), (dy, "dy")))
    )
    tx, tw, trs, tdy = (io.device_tensor(a) for a in (x, w, rstd, dy))
    dyx, gx = torch.empty_like(tx), torch.empty_like(tx)
    grid = L.flat_grid(r * c)
    L.launch(tr.rmsnorm_backward_parts_kernel, grid, tx, tw, trs, tdy, dyx, gx, r * c, c, BLOCK=L.FLAT_BLOCK)
    dw = L.reduce_cols(dyx)  # (C,)
    t = L.reduce_rows(gx, is_max=False)  # (R,)
    dx = torch.empty_like(tx)
    L.launch(
        tr.rmsnorm_backward_dx_kernel,
        grid,
        tx,
        tw,
        trs,
        tdy,
        t,
        dx,
        L.device_scalars(F32(c)),
        r * c,
        c,
        BLOCK=L.FLAT_BLOCK,
    )
    return io.to_caller(dx, x), io.to_caller(dw, x)


def _softmax_parts(tl_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(m (N,), e (N, V), s (N,)) of section 4.4 on device logits."""
    n, v = tl_.shape
    m = L.reduce_rows(tl_, is_max=True)  # (N,)
    e = torch.empty_like(tl_)  # (N, V)
    L.launch(tr.shifted_exp_kernel, L.flat_grid(n * v), tl_, m, e, n * v, v, BLOCK=L.FLAT_BLOCK)
    return m, e, L.reduce_rows(e, is_max=False)


def cross_entropy(logits: Arr, targets: Arr) -> Arr:
    """Mean over rows of logsumexp(l_i) - l[i, t_i]: logits (N, V), targets int64 (N,) -> 0-d float32."""
    io.torch_mode(logits, targets)  # refuses a mix; results come back in the kind of the first array
    checkable, known = io.index_checkable(targets, "targets")
    n, v = validate.check_cross_entropy(io.checkable(logits, "logits"), checkable)
    io.check_range(known, "targets", v)
    tl_, tt = io.device_tensor(logits), io.device_tensor(targets)
    m, _, s = _softmax_parts(tl_)
    loss = torch.empty(n, dtype=torch.float32, device=tl_.device)  # (N,)
    L.launch(tr.row_loss_kernel, L.flat_grid(n), tl_, tt, m, s, loss, n, v, BLOCK=L.FLAT_BLOCK)
    total = L.reduce_rows(loss.reshape(1, n), is_max=False)  # (1,)
    mean = torch.empty(1, dtype=torch.float32, device=tl_.device)
    L.launch(tr.divide_kernel, (1,), total, mean, L.device_scalars(F32(n)), 1, BLOCK=16)
    return io.to_caller(mean.reshape(()), logits)


def cross_entropy_backward(logits: Arr, targets: Arr, dloss: Scalar) -> Arr:
    """dlogits (N, V) = (e / s - onehot(t)) * (dloss / N)."""
    io.torch_mode(logits, targets)  # refuses a mix; results come back in the kind of the first array
    checkable, known = io.index_checkable(targets, "targets")
    n, v = validate.check_cross_entropy(io.checkable(logits, "logits"), checkable)
    io.check_range(known, "targets", v)
    g = validate.to_float32(dloss, "dloss") / F32(n)  # host scalar, one rounding
    tl_, tt = io.device_tensor(logits), io.device_tensor(targets)
    _, e, s = _softmax_parts(tl_)
    dl = torch.empty_like(tl_)
    L.launch(
        tr.cross_entropy_grad_kernel,
        L.flat_grid(n * v),
        e,
        s,
        tt,
        dl,
        L.device_scalars(g),
        n * v,
        v,
        BLOCK=L.FLAT_BLOCK,
    )
    return io.to_caller(dl, logits)


def embedding(table: Arr, idx: Arr) -> Arr:
    """out[n] = table[idx[n]]: table (V, C), idx int64 (N,) -> (N, C), a copy."""
    io.torch_mode(table, idx)  # refuses a mix; results come back in the kind of the first array
    checkable, known = io.index_checkable(idx, "idx")
    v, c, n = validate.check_embedding(io.checkable(table, "table"), checkable)
    io.check_range(known, "idx", v)
    tt, ti = io.device_tensor(table), io.device_tensor(idx)
    out = torch.empty((n, c), dtype=torch.float32, device=tt.device)
    L.launch(tr.gather_rows_kernel, L.flat_grid(n * c), tt, ti, out, n * c, c, BLOCK=L.FLAT_BLOCK)
    return io.to_caller(out, table)


def embedding_backward(idx: Arr, dout: Arr, vocab_size: int) -> Arr:
    """dtable (V, C): +0.0, then dtable[idx[n]] += dout[n] for n in increasing order."""
    io.torch_mode(idx, dout)  # refuses a mix; results come back in the kind of the first array
    checkable, known = io.index_checkable(idx, "idx")
    v, c, n = validate.check_embedding_backward(checkable, io.checkable(dout, "dout"), vocab_size)
    io.check_range(known, "idx", v)
    ti, td = io.device_tensor(idx), io.device_tensor(dout)
    # Integer bookkeeping only: each id's tokens in increasing n (a stable sort),
    # and where each id's run starts (the first sorted position holding an id
    # >= j; a search, because bincount would read the ids' maximum back to
    # the host); the float sums happen in the kernel.
    ids, order = torch.sort(ti, stable=True)  # (N,), (N,)
    start = torch.searchsorted(ids, torch.arange(v + 1, dtype=torch.int64, device=td.device))  # (V + 1,)
    dtable = torch.empty((v, c), dtype=torch.float32, device=td.device)
    L.launch(tr.scatter_rows_kernel, (v, L.cdiv(c, SCATTER_BC)), td, order, start, dtable, c, BC=SCATTER_BC)
    return io.to_caller(dtable, idx)


def adamw(
    p: Arr,
    g: Arr,
    m: Arr,
    v: Arr,
    step: int,
    lr: Scalar,
    beta1: Scalar,
    beta2: Scalar,
    eps: Scalar,
    weight_decay: Scalar,
) -> tuple[Arr, Arr, Arr]:
    """One AdamW update (section 4.6) on p, g, m, v of one shape; returns (p', m', v')."""
    io.torch_mode(p, g, m, v)  # refuses a mix; results come back in the kind of the first array
    step = validate.check_adamw(
        io.checkable(p, "p"), io.checkable(g, "g"), io.checkable(m, "m"), io.checkable(v, "v"), step
    )
    k = adamw_scalars(step, lr, beta1, beta2, eps, weight_decay)
    scal = L.device_scalars(k.b1, k.omb1, k.b2, k.omb2, k.ss, k.sbc2, k.eps, k.decay)
    tp, tg, tm, tv = (io.device_tensor(x) for x in (p, g, m, v))
    p2, m2, v2 = (torch.empty_like(tp) for _ in range(3))
    L.launch(tr.adamw_kernel, L.flat_grid(tp.numel()), tp, tg, tm, tv, p2, m2, v2, scal, tp.numel(), BLOCK=L.FLAT_BLOCK)
    return io.to_caller(p2, p), io.to_caller(m2, p), io.to_caller(v2, p)


if TYPE_CHECKING:  # mypy holds this module to the contract (kernels/backend_contract.py); nothing runs here
    from kernels import triton_backend as _this
    from kernels.backend_contract import Backend

    _CONFORMS: Backend[torch.Tensor] = _this
