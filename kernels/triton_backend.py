"""The Triton backend: docs/arithmetic.md on the GPU, bitwise equal to kernels.reference.

Every function of kernels/__init__.py's list is here. Each accepts numpy
float32 arrays (copied to the device, result copied back as numpy) or torch
tensors already on the backend's device (kept there; results are torch
tensors), but not a mix. Inputs are checked by kernels.validate, so this
backend refuses exactly what the others refuse.

Keeping a whole step on the device: `to_device` uploads a numpy array once
(and notes an int64 array's value range, read on the host, so the index
checks of embedding and cross-entropy need no copy back for it or for the
slices `split_tokens` cuts from it); `add`, `div_scalar`, `split_heads`,
`merge_heads` and `split_tokens` do the engine's work between kernels on the
device; `to_host` copies a result back. Host scalars (eps, 1/N, AdamW's) go up
as small vectors that kernels.triton_launch keeps by value, so a repeated one
is uploaded once. Nothing else copies between host and device for tensor
inputs (tests/engine/test_device_residency.py counts).

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

import weakref

from kernels.triton_math import MODE  # first: raises ImportError without a device

if MODE == "compile":
    raise ImportError("triton backend needs CUDA or TRITON_INTERPRET=1 (P2PAUDIT_TRITON_COMPILE_ONLY=1 only compiles)")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from kernels import (
    KernelInputError,  # noqa: E402
    numpy_layout,  # noqa: E402
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


# numpy's name for each torch dtype validate may be shown (others are refused as not float32)
_NUMPY_DTYPES = {
    t: np.dtype(n)
    for t, n in (
        (torch.float32, np.float32),
        (torch.float64, np.float64),
        (torch.float16, np.float16),
        (torch.int64, np.int64),
        (torch.int32, np.int32),
        (torch.int16, np.int16),
        (torch.int8, np.int8),
        (torch.uint8, np.uint8),
        (torch.bool, np.bool_),
    )
}


def _check_tensor(x: torch.Tensor, name: str) -> None:
    """Refuse a tensor on another device or not contiguous."""
    if x.device.type != L.DEVICE.type:
        raise KernelInputError(f"{name} is on {x.device}, want {L.DEVICE.type} (the triton backend's device)")
    if not x.is_contiguous():
        raise KernelInputError(f"{name} is not contiguous (strides {tuple(x.stride())}), want a contiguous tensor")


def _checkable(x: object, name: str) -> object:
    """What kernels.validate sees for `x`: numpy input itself; for a tensor, an array of its shape and dtype.

    Refuses tensors on another device or not contiguous.
    """
    if not isinstance(x, torch.Tensor):
        return x
    _check_tensor(x, name)
    if x.dtype not in _NUMPY_DTYPES:
        raise KernelInputError(f"{name} has dtype {x.dtype}, want float32")
    return np.empty(tuple(x.shape), dtype=_NUMPY_DTYPES[x.dtype])  # never written or read: shape and dtype only


# ------------------------------------------------- index tensors, checked on the host

# id(tensor) -> (weak reference, tensor._version, lo, hi): int64 device tensors
# whose values are known to lie in [lo, hi] (lo > hi: empty) without reading
# them, because they were uploaded by to_device (range read from the numpy
# array) or cut from such a tensor by split_tokens. An in-place change bumps
# _version (shared by every view of a tensor) and the entry no longer counts.
_INDEX_RANGES: dict[int, tuple[weakref.ref, int, int, int]] = {}


def _remember_range(t: torch.Tensor, lo: int, hi: int) -> None:
    """Note that every value of t lies in [lo, hi]."""
    key = id(t)

    def forget(ref: weakref.ref, key: int = key) -> None:
        entry = _INDEX_RANGES.get(key)
        if entry is not None and entry[0] is ref:
            del _INDEX_RANGES[key]

    _INDEX_RANGES[key] = (weakref.ref(t, forget), t._version, lo, hi)


def _known_range(t: torch.Tensor) -> tuple[int, int] | None:
    """(lo, hi) noted for t or for the tensor t is a view of, if still unchanged; else None."""
    for cand in (t, t._base):
        entry = _INDEX_RANGES.get(id(cand)) if cand is not None else None
        if entry is not None and entry[0]() is cand and entry[1] == cand._version:
            return entry[2], entry[3]
    return None


def _index_checkable(x: object, name: str) -> tuple[object, tuple[int, int] | None]:
    """(what kernels.validate sees for an index array `x`, its known value range or None).

    numpy input: itself. A device tensor with a known range: an all-zero
    stand-in of its shape (the range is checked by _check_range); any other
    tensor: its values, copied to the host.
    """
    if not isinstance(x, torch.Tensor):
        return x, None
    _check_tensor(x, name)
    known = _known_range(x) if x.dtype == torch.int64 else None
    if known is None:
        return x.detach().cpu().numpy(), None
    return np.zeros(tuple(x.shape), dtype=np.int64), known


def _check_range(known: tuple[int, int] | None, name: str, size: int) -> None:
    """Refuse a known index range that leaves [0, size)."""
    if known is not None and known[0] <= known[1] and (known[0] < 0 or known[1] >= size):
        raise KernelInputError(f"{name} holds values in [{known[0]}, {known[1]}], outside [0, {size})")


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
    checkable, known = _index_checkable(targets, "targets")
    n, v = validate.check_cross_entropy(_checkable(logits, "logits"), checkable)
    _check_range(known, "targets", v)
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
    checkable, known = _index_checkable(targets, "targets")
    n, v = validate.check_cross_entropy(_checkable(logits, "logits"), checkable)
    _check_range(known, "targets", v)
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
    checkable, known = _index_checkable(idx, "idx")
    v, c, n = validate.check_embedding(_checkable(table, "table"), checkable)
    _check_range(known, "idx", v)
    tt, ti = _to_device(table), _to_device(idx)
    out = torch.empty((n, c), dtype=torch.float32, device=tt.device)
    L.launch(tr.gather_rows_kernel, L.flat_grid(n * c), tt, ti, out, n * c, c, BLOCK=L.FLAT_BLOCK)
    return _to_caller(out, as_torch)


def embedding_backward(idx, dout, vocab_size):
    """dtable (V, C): +0.0, then dtable[idx[n]] += dout[n] for n in increasing order."""
    as_torch = _torch_mode(idx, dout)
    checkable, known = _index_checkable(idx, "idx")
    v, c, n = validate.check_embedding_backward(checkable, _checkable(dout, "dout"), vocab_size)
    _check_range(known, "idx", v)
    ti, td = _to_device(idx), _to_device(dout)
    # Integer bookkeeping only: each id's tokens in increasing n (a stable sort),
    # and where each id's run starts (the first sorted position holding an id
    # >= j; a search, because bincount would read the ids' maximum back to
    # the host); the float sums happen in the kernel.
    ids, order = torch.sort(ti, stable=True)  # (N,), (N,)
    start = torch.searchsorted(ids, torch.arange(v + 1, dtype=torch.int64, device=td.device))  # (V + 1,)
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


# ------------------------------------------- between kernels: layout, +, /, transfers


def to_device(x):
    """A host numpy array as a contiguous tensor on the backend's device (one copy).

    A tensor already on the device is returned as it is. For an int64 array
    the value range is read here, on the host, so index checks of the tensor
    (and of split_tokens' slices of it) need no copy back.
    """
    if isinstance(x, torch.Tensor):
        _check_tensor(x, "x")
        return x
    if not isinstance(x, np.ndarray):
        raise KernelInputError(f"x is a {type(x).__name__}, want a numpy array or a device tensor")
    host = x if x.flags.c_contiguous and x.flags.writeable else x.copy(order="C")  # keeps 0-d arrays 0-d
    # (torch.from_numpy warns on a read-only array: copied on the host, not a transfer)
    t = torch.from_numpy(host).to(L.DEVICE, copy=True)
    if host.dtype == np.int64:
        lo, hi = (int(host.min()), int(host.max())) if host.size else (0, -1)
        _remember_range(t, lo, hi)
    return t


def to_host(x):
    """A device tensor as a numpy array (one copy); numpy input is returned as np.asarray(x)."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return numpy_layout.to_host(x)


def add(a, b):
    """a + b, float32, rounded once: two device tensors of one shape (numpy input: the numpy sum)."""
    if not _torch_mode(a, b):
        return numpy_layout.add(a, b)
    validate.check_pair(_checkable(a, "a"), "a", _checkable(b, "b"), "b")
    y = torch.empty_like(a)
    L.launch(tr.add_kernel, L.flat_grid(a.numel()), a, b, y, a.numel(), BLOCK=L.FLAT_BLOCK)
    return y


def div_scalar(x, d):
    """x / float32(d), rounded once (div_rn), on a float32 device tensor (numpy input: the numpy quotient)."""
    if not _torch_mode(x):
        return numpy_layout.div_scalar(x, d)
    validate.check_elementwise(_checkable(x, "x"))
    d32 = validate.to_float32(d, "d")
    y = torch.empty_like(x)
    L.launch(tr.divide_kernel, L.flat_grid(x.numel()), x, y, L.device_scalars(d32), x.numel(), BLOCK=L.FLAT_BLOCK)
    return y


def split_heads(x, B: int, T: int, H: int):
    """(N, C) -> (BH, T, D), contiguous: head h of sequence b is row b*H + h (an exact copy on the device)."""
    if not _torch_mode(x):
        return numpy_layout.split_heads(x, B, T, H)
    _check_tensor(x, "x")
    D = x.shape[1] // H
    return x.reshape(B, T, H, D).permute(0, 2, 1, 3).contiguous().reshape(B * H, T, D)


def merge_heads(x, B: int, H: int):
    """(BH, T, D) -> (N, C), the inverse of split_heads (an exact copy on the device)."""
    if not _torch_mode(x):
        return numpy_layout.merge_heads(x, B, H)
    _check_tensor(x, "x")
    _, T, D = x.shape
    return x.reshape(B, H, T, D).permute(0, 2, 1, 3).contiguous().reshape(B * T, H * D)


def split_tokens(tokens):
    """int64 tokens (B, T+1) -> (inputs, targets, positions), each int64 (B*T,), on the device.

    inputs = tokens[:, :-1] and targets = tokens[:, 1:] inherit the value range
    noted for tokens (by to_device); positions are 0..T-1 repeated B times.
    """
    if not _torch_mode(tokens):
        return numpy_layout.split_tokens(tokens)
    _check_tensor(tokens, "tokens")
    B, T = tokens.shape[0], tokens.shape[1] - 1
    idx = tokens[:, :-1].contiguous().reshape(B * T)
    targets = tokens[:, 1:].contiguous().reshape(B * T)
    pos = torch.arange(T, dtype=torch.int64, device=tokens.device).repeat(B)
    known = _known_range(tokens)
    if known is not None:
        _remember_range(idx, *known)
        _remember_range(targets, *known)
    _remember_range(pos, 0, T - 1)
    return idx, targets, pos
