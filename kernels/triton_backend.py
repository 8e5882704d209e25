"""The Triton backend: docs/arithmetic.md on the GPU, bitwise equal to kernels.reference.

Every function of kernels/__init__.py's list is here. Each accepts numpy
float32 arrays (copied to the device, result copied back as numpy) or torch
tensors already on the backend's device (kept there; results are torch
tensors), but not a mix. Inputs are checked by kernels.validate, so this
backend refuses exactly what the others refuse.

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

from kernels.triton_math import MODE  # first: raises ImportError without a device

if MODE == "compile":
    raise ImportError("triton backend needs CUDA or TRITON_INTERPRET=1 (P2PAUDIT_TRITON_COMPILE_ONLY=1 only compiles)")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernels import (
    KernelInputError,  # noqa: E402
    validate,  # noqa: E402
)
from kernels import constants as K  # noqa: E402
from kernels import triton_kernels as tk  # noqa: E402
from kernels import triton_launch as L  # noqa: E402
from kernels import triton_rows as tr  # noqa: E402
from kernels.adamw_scalars import adamw_scalars  # noqa: E402

F32 = np.float32
SCATTER_BC = 128  # columns per program of the embedding gradient

# ------------------------------------------------------------ inputs, outputs


def _checkable(x: object, name: str, values: bool = False) -> object:
    """What kernels.validate sees for `x`: numpy input itself; for a tensor, an array of its shape and dtype.

    With `values` the tensor's values are copied to the host (index arrays,
    whose range is checked). Refuses tensors on another device or not contiguous.
    """
    if not isinstance(x, torch.Tensor):
        return x
    if x.device.type != L.DEVICE.type:
        raise KernelInputError(f"{name} is on {x.device}, want {L.DEVICE.type} (the triton backend's device)")
    if not x.is_contiguous():
        raise KernelInputError(f"{name} is not contiguous (strides {tuple(x.stride())}), want a contiguous tensor")
    if values:
        return x.detach().cpu().numpy()
    try:
        dtype = torch.empty((), dtype=x.dtype).numpy().dtype
    except TypeError:
        raise KernelInputError(f"{name} has dtype {x.dtype}, want float32") from None
    return np.empty(x.shape, dtype=dtype)  # never written or read: shape and dtype only


def _torch_mode(*arrays: object) -> bool:
    """True if the array arguments are torch tensors, False if numpy; refuses a mix."""
    kinds = {isinstance(a, torch.Tensor) for a in arrays}
    if len(kinds) > 1:
        raise KernelInputError("arguments mix numpy arrays and torch tensors, want all of one kind")
    return kinds == {True}


def _to_device(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    """A checked input as a device tensor (numpy arrays are copied to the device)."""
    if isinstance(x, torch.Tensor):
        return x.detach()
    return torch.from_numpy(x).to(L.DEVICE)


def _to_caller(t: torch.Tensor, as_torch: bool) -> np.ndarray | torch.Tensor:
    """A result in the caller's kind: the tensor itself, or a numpy copy."""
    return t if as_torch else t.cpu().numpy()


# ---------------------------------------------------------------- reductions


def sum_rows(x):
    """psum of each row: (R, C) -> (R,)."""
    as_torch = _torch_mode(x)
    validate.check_rows(_checkable(x, "x"))
    return _to_caller(L.reduce_rows(_to_device(x), is_max=False), as_torch)


def sum_cols(x):
    """psum down each column: (R, C) -> (C,)."""
    as_torch = _torch_mode(x)
    validate.check_rows(_checkable(x, "x"))
    return _to_caller(L.reduce_cols(_to_device(x)), as_torch)


def max_rows(x):
    """pmax of each row: (R, C) -> (R,), C >= 1."""
    as_torch = _torch_mode(x)
    validate.check_rows(_checkable(x, "x"), min_cols=1)
    return _to_caller(L.reduce_rows(_to_device(x), is_max=True), as_torch)


def _matmul(a, b, layout: str):
    """Check, run and return the product of `layout` on 2-d or batched 3-d operands."""
    as_torch = _torch_mode(a, b)
    validate.check_matmul(_checkable(a, "a"), _checkable(b, "b"), layout)
    ta, tb = _to_device(a), _to_device(b)
    if ta.dim() == 2:
        return _to_caller(L.matmul(ta[None], tb[None], layout)[0], as_torch)
    return _to_caller(L.matmul(ta, tb, layout), as_torch)


def matmul(a, b):
    """a (M, K) @ b (K, N) -> (M, N); or batched (BH, M, K) @ (BH, K, N)."""
    return _matmul(a, b, "nn")


def matmul_nt(a, b):
    """a (M, K) @ b (N, K)^T -> (M, N); or batched."""
    return _matmul(a, b, "nt")


def matmul_tn(a, b):
    """a (K, M)^T @ b (K, N) -> (M, N); or batched."""
    return _matmul(a, b, "tn")


# ------------------------------------------------------ elementary functions


def _unary(x, op: int):
    """exp (0), log (1) or silu (2) of a float32 array of any shape."""
    as_torch = _torch_mode(x)
    validate.check_elementwise(_checkable(x, "x"))
    tx = _to_device(x)
    y = torch.empty_like(tx)
    L.launch(tk.unary_kernel, L.flat_grid(tx.numel()), tx, y, tx.numel(), OP=op, BLOCK=L.FLAT_BLOCK)
    return _to_caller(y, as_torch)


def exp(x):
    """Elementwise exp (section 3.1), any shape."""
    return _unary(x, 0)


def log(x):
    """Elementwise natural log (section 3.2), any shape."""
    return _unary(x, 1)


def silu(x):
    """x / (1 + exp(-x)), any shape."""
    return _unary(x, 2)


def silu_backward(x, dy):
    """dy * g with g = s * (1 + x * (1 - s)) and s = 1 / (1 + exp(-x)) (section 3.3); x and dy of one shape."""
    as_torch = _torch_mode(x, dy)
    validate.check_pair(_checkable(x, "x"), "x", _checkable(dy, "dy"), "dy")
    tx, tdy = _to_device(x), _to_device(dy)
    dx = torch.empty_like(tx)
    L.launch(tk.silu_backward_kernel, L.flat_grid(tx.numel()), tx, tdy, dx, tx.numel(), BLOCK=L.FLAT_BLOCK)
    return _to_caller(dx, as_torch)


# -------------------------------------------------------- composite operations


def _softmax_launch(kernel, ins: list[torch.Tensor], bh: int, t: int) -> torch.Tensor:
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


def softmax_causal(s):
    """Row softmax over j <= t of s (BH, T, T); entries j > t are +0.0."""
    as_torch = _torch_mode(s)
    validate.check_square_scores(_checkable(s, "s"), "s")
    return _to_caller(_softmax(_to_device(s)), as_torch)


def softmax_causal_backward(p, dp):
    """ds = p * (dp - psum(p * dp over j <= t)); +0.0 for j > t. p, dp (BH, T, T)."""
    as_torch = _torch_mode(p, dp)
    validate.check_softmax_backward(_checkable(p, "p"), _checkable(dp, "dp"))
    return _to_caller(_softmax_backward(_to_device(p), _to_device(dp)), as_torch)


def _attention_scale(d: int) -> torch.Tensor:
    """1 / sqrt(float32(D)), rounded twice on the host, as a device scalar."""
    return L.device_scalars(K.ONE / np.sqrt(F32(d)))


def attention(q, k, v):
    """Causal attention per batch-head: q, k, v (BH, T, D) -> (o (BH, T, D), p (BH, T, T))."""
    as_torch = _torch_mode(q, k, v)
    _, _, d = validate.check_attention(_checkable(q, "q"), _checkable(k, "k"), _checkable(v, "v"))
    tq, tk_, tv = _to_device(q), _to_device(k), _to_device(v)
    s = L.matmul(tq, tk_, "nt", scale=_attention_scale(d))  # (BH, T, T)
    p = _softmax(s)  # (BH, T, T)
    o = L.matmul(p, tv, "nn")  # (BH, T, D)
    return _to_caller(o, as_torch), _to_caller(p, as_torch)


def attention_backward(q, k, v, p, do):
    """Gradients (dq, dk, dv), each (BH, T, D), given p from attention and do (BH, T, D)."""
    as_torch = _torch_mode(q, k, v, p, do)
    names = ("q", "k", "v", "p", "do")
    _, _, d = validate.check_attention_backward(*(_checkable(x, n) for x, n in zip((q, k, v, p, do), names)))
    tq, tk_, tv, tp, tdo = (_to_device(x) for x in (q, k, v, p, do))
    scale = _attention_scale(d)
    dp = L.matmul(tdo, tv, "nt")  # (BH, T, T)
    dv = L.matmul(tp, tdo, "tn")  # (BH, T, D)
    ds = _softmax_backward(tp, dp)  # (BH, T, T)
    dq = L.matmul(ds, tk_, "nn", scale=scale)  # (BH, T, D)
    dk = L.matmul(ds, tq, "tn", scale=scale)  # (BH, T, D)
    return _to_caller(dq, as_torch), _to_caller(dk, as_torch), _to_caller(dv, as_torch)


def _mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a * b elementwise on device tensors of one shape."""
    y = torch.empty_like(a)
    L.launch(tr.mul_kernel, L.flat_grid(a.numel()), a, b, y, a.numel(), BLOCK=L.FLAT_BLOCK)
    return y


def rmsnorm(x, w, eps):
    """y = (x * rstd) * w with rstd = 1 / sqrt(psum(x^2) / C + eps): x (R, C), w (C,) -> (y, rstd (R,))."""
    as_torch = _torch_mode(x, w)
    r, c = validate.check_rmsnorm(_checkable(x, "x"), _checkable(w, "w"))
    eps32 = validate.to_float32(eps, "eps")
    tx, tw = _to_device(x), _to_device(w)
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
    return _to_caller(y, as_torch), _to_caller(rstd, as_torch)


def rmsnorm_backward(x, w, rstd, dy):
    """(dx (R, C), dw (C,)) of rmsnorm, given rstd (R,) from the forward pass and dy (R, C)."""
    as_torch = _torch_mode(x, w, rstd, dy)
    r, c = validate.check_rmsnorm_backward(
        *(_checkable(a, n) for a, n in ((x, "x"), (w, "w"), (rstd, "rstd"), (dy, "dy")))
    )
    tx, tw, trs, tdy = (_to_device(a) for a in (x, w, rstd, dy))
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
    return _to_caller(dx, as_torch), _to_caller(dw, as_torch)


def _softmax_parts(tl_: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(m (N,), e (N, V), s (N,)) of section 4.4 on device logits."""
    n, v = tl_.shape
    m = L.reduce_rows(tl_, is_max=True)  # (N,)
    e = torch.empty_like(tl_)  # (N, V)
    L.launch(tr.shifted_exp_kernel, L.flat_grid(n * v), tl_, m, e, n * v, v, BLOCK=L.FLAT_BLOCK)
    return m, e, L.reduce_rows(e, is_max=False)


def cross_entropy(logits, targets):
    """Mean over rows of logsumexp(l_i) - l[i, t_i]: logits (N, V), targets int64 (N,) -> 0-d float32."""
    as_torch = _torch_mode(logits, targets)
    n, v = validate.check_cross_entropy(_checkable(logits, "logits"), _checkable(targets, "targets", values=True))
    tl_, tt = _to_device(logits), _to_device(targets)
    m, _, s = _softmax_parts(tl_)
    loss = torch.empty(n, dtype=torch.float32, device=tl_.device)  # (N,)
    L.launch(tr.row_loss_kernel, L.flat_grid(n), tl_, tt, m, s, loss, n, v, BLOCK=L.FLAT_BLOCK)
    total = L.reduce_rows(loss.reshape(1, n), is_max=False)  # (1,)
    mean = torch.empty(1, dtype=torch.float32, device=tl_.device)
    L.launch(tr.divide_kernel, (1,), total, mean, L.device_scalars(F32(n)), 1, BLOCK=16)
    return _to_caller(mean.reshape(()), as_torch)


def cross_entropy_backward(logits, targets, dloss):
    """dlogits (N, V) = (e / s - onehot(t)) * (dloss / N)."""
    as_torch = _torch_mode(logits, targets)
    n, v = validate.check_cross_entropy(_checkable(logits, "logits"), _checkable(targets, "targets", values=True))
    g = validate.to_float32(dloss, "dloss") / F32(n)  # host scalar, one rounding
    tl_, tt = _to_device(logits), _to_device(targets)
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
    return _to_caller(dl, as_torch)


def embedding(table, idx):
    """out[n] = table[idx[n]]: table (V, C), idx int64 (N,) -> (N, C), a copy."""
    as_torch = _torch_mode(table, idx)
    _, c, n = validate.check_embedding(_checkable(table, "table"), _checkable(idx, "idx", values=True))
    tt, ti = _to_device(table), _to_device(idx)
    out = torch.empty((n, c), dtype=torch.float32, device=tt.device)
    L.launch(tr.gather_rows_kernel, L.flat_grid(n * c), tt, ti, out, n * c, c, BLOCK=L.FLAT_BLOCK)
    return _to_caller(out, as_torch)


def embedding_backward(idx, dout, vocab_size):
    """dtable (V, C): +0.0, then dtable[idx[n]] += dout[n] for n in increasing order."""
    as_torch = _torch_mode(idx, dout)
    v, c, n = validate.check_embedding_backward(
        _checkable(idx, "idx", values=True), _checkable(dout, "dout"), vocab_size
    )
    ti, td = _to_device(idx), _to_device(dout)
    # Integer bookkeeping only: each id's tokens in increasing n (a stable sort),
    # and where each id's run starts; the float sums happen in the kernel.
    order = torch.sort(ti, stable=True).indices  # (N,)
    start = torch.zeros(v + 1, dtype=torch.int64, device=td.device)
    start[1:] = torch.cumsum(torch.bincount(ti, minlength=v), 0)
    dtable = torch.empty((v, c), dtype=torch.float32, device=td.device)
    L.launch(tr.scatter_rows_kernel, (v, L.cdiv(c, SCATTER_BC)), td, order, start, dtable, c, BC=SCATTER_BC)
    return _to_caller(dtable, as_torch)


def adamw(p, g, m, v, step, lr, beta1, beta2, eps, weight_decay):
    """One AdamW update (section 4.6) on p, g, m, v of one shape; returns (p', m', v')."""
    as_torch = _torch_mode(p, g, m, v)
    step = validate.check_adamw(*(_checkable(x, n) for x, n in ((p, "p"), (g, "g"), (m, "m"), (v, "v"))), step)
    k = adamw_scalars(step, lr, beta1, beta2, eps, weight_decay)
    scal = L.device_scalars(k.b1, k.omb1, k.b2, k.omb2, k.ss, k.sbc2, k.eps, k.decay)
    tp, tg, tm, tv = (_to_device(x) for x in (p, g, m, v))
    outs = [torch.empty_like(tp) for _ in range(3)]
    L.launch(tr.adamw_kernel, L.flat_grid(tp.numel()), tp, tg, tm, tv, *outs, scal, tp.numel(), BLOCK=L.FLAT_BLOCK)
    return tuple(_to_caller(o, as_torch) for o in outs)
