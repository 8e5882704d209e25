"""Op table 1's products and network ops: mm, bmm, addmm, causal attention (grouped heads too), nll_loss, embedding.

Each is the backend's canonical kernel (docs/arithmetic.md sections 2.3 and
4; the folds at the run's arithmetic version), with the layout work in
numpy: transposed operands choose matmul_nt / matmul_tn (the same dot
products, so the same bits, without a copy).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from kernels import cpu_lab  # the cpu backend's fused entries (numba)
from p2paudit.lab.context import Handler, OpContext
from p2paudit.lab.convert import F32, host, view, wrap
from p2paudit.lab.refusal import refused


def _layout(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """(array, transposed): a C-contiguous array, or the C-contiguous array whose last two axes x swaps."""
    if x.flags.c_contiguous:
        return x, False
    swapped = np.swapaxes(x, -1, -2)
    if swapped.flags.c_contiguous:
        return swapped, True
    return np.ascontiguousarray(x), False


def product(ctx: OpContext, name: str, a_t: torch.Tensor, b_t: torch.Tensor) -> np.ndarray:
    """a @ b (2-d, or 3-d batched) through the matmul variant that needs no copy."""
    a, b = view(a_t), view(b_t)
    if a.dtype != np.float32 or b.dtype != np.float32:
        raise refused(name, f"operands of dtype {a.dtype} and {b.dtype} (products are float32)")
    (a2, at), (b2, bt) = _layout(a), _layout(b)
    if at and bt:
        a2, at = np.ascontiguousarray(a), False
    if at:
        return np.asarray(ctx.be.matmul_tn(a2, b2))
    if bt:
        return np.asarray(ctx.be.matmul_nt(a2, b2))
    return np.asarray(ctx.be.matmul(a2, b2))


def mm(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """aten.mm / aten.bmm: the fold of section 2.3 (or 7.2 at version 2)."""
    return wrap(product(ctx, name, a["self"], a["mat2"]))


def addmm(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """aten.addmm(bias, x, w) with beta = alpha = 1: the product, then + bias (one rounding)."""
    if a["beta"] != 1 or a["alpha"] != 1:
        raise refused(name, f"beta={a['beta']!r}, alpha={a['alpha']!r} (the table has beta = alpha = 1)")
    out = product(ctx, name, a["mat1"], a["mat2"])
    with np.errstate(all="ignore"):
        return wrap(out + view(a["self"]))


def _groups(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    """How many query heads share each key/value head: q (B, H, T, D), k and v (B, H/g, T, D)."""
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4:
        raise refused(name, f"q, k, v of shapes {[tuple(t.shape) for t in (q, k, v)]} (want (B, H, T, D))")
    b, h, t, d = q.shape
    kb, kh, kt, kd = k.shape
    if (kb, kt, kd) != (b, t, d) or kh == 0 or h % kh:
        raise refused(name, f"q {tuple(q.shape)} and k, v {tuple(k.shape)} (want H a multiple of k's heads)")
    return h // kh


def _heads(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[np.ndarray, ...]:
    """q, k, v as C-contiguous (B*H, T, D) arrays; grouped k, v heads repeated (copies) to H."""
    g = _groups(name, q, k, v)
    b, h, t, d = q.shape
    kv = [host(x) if g == 1 else np.repeat(host(x), g, axis=1) for x in (k, v)]  # head j serves j*g .. j*g+g-1
    return host(q).reshape(b * h, t, d), kv[0].reshape(b * h, t, d), kv[1].reshape(b * h, t, d)


def _fold_groups(ctx: OpContext, dx: np.ndarray, shape: tuple[int, ...], g: int) -> np.ndarray:
    """A (B*H, T, D) gradient of repeated k or v heads summed back per group: one psum over the g heads."""
    b, kh, t, d = shape
    if g == 1:
        return dx.reshape(shape)
    grouped = np.ascontiguousarray(np.moveaxis(dx.reshape(b, kh, g, t, d), 2, -1))  # (B, H/g, T, D, g)
    return np.asarray(ctx.be.sum_rows(grouped.reshape(-1, g))).reshape(shape)


def _check_attention_args(name: str, a: dict[str, Any], d: int) -> None:
    if not a["is_causal"] or a.get("attn_mask") is not None or a["dropout_p"] != 0.0:
        raise refused(
            name,
            f"is_causal={a['is_causal']}, attn_mask={'given' if a.get('attn_mask') is not None else None}, "
            f"dropout_p={a['dropout_p']} (the table has causal attention, no mask, no dropout)",
        )
    scale = a.get("scale")
    if scale is not None and F32(scale) != F32(1.0) / np.sqrt(F32(d)):
        raise refused(name, f"scale={scale!r} (the table's scale is 1/sqrt(D))")


def attention(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """SDPA forward (causal): S = q k^T * scale, p = softmax_causal(S), o = p v; lse = m + log(s) per row.

    On cpu, one kernel (kernels/cpu_lab.py attention_lse) leaves out the masked half of the products, as the
    backend's attention does, and takes lse from the softmax's own m and s: the same bits as the composition.
    """
    q, k, v = _heads(name, a["query"], a["key"], a["value"])
    _check_attention_args(name, a, q.shape[2])
    bh, t = q.shape[0], q.shape[1]
    keep = ctx.keeps_attention(a["query"], a["key"], bh * t * t * 4)
    o, p, lse = _attention_values(ctx, q, k, v, keep)
    shape = tuple(a["query"].shape)
    out = wrap(o.reshape(shape))
    if p is not None and keep:
        ctx.save_attention(a["query"], a["key"], out, p)
    return out, wrap(lse.reshape(shape[:3]))


def _attention_values(
    ctx: OpContext, q: np.ndarray, k: np.ndarray, v: np.ndarray, keep: bool
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(o (BH, T, D), p (BH, T, T), lse (BH*T,)) of section 8.6 from q, k, v (BH, T, D); on cpu, p is None
    unless `keep` (the kernel then holds a panel's rows at a time)."""
    if ctx.cpu and keep:
        o, p, lse = cpu_lab.attention_lse(q, k, v, ctx.fused)
        return o, p, lse
    if ctx.cpu:
        o, lse = cpu_lab.attention_lse_unkept(q, k, v, ctx.fused)
        return o, None, lse
    bh, t, d = q.shape
    be = ctx.be
    with np.errstate(all="ignore"):
        s = np.asarray(be.matmul_nt(q, k)) * (F32(1.0) / np.sqrt(F32(d)))  # (BH, T, T)
        p = np.asarray(be.softmax_causal(s))  # (BH, T, T)
        o = np.asarray(be.matmul(p, v))  # (BH, T, D)
        causal = np.tri(t, t, dtype=bool)
        m = np.asarray(be.max_rows(np.where(causal, s, F32(-np.inf)).reshape(bh * t, t)))  # (BH*T,)
        e = np.asarray(be.exp(np.ascontiguousarray(s.reshape(bh * t, t) - m[:, None])))
        e = np.where(causal.reshape(1, t, t), e.reshape(bh, t, t), F32(-0.0)).reshape(bh * t, t)
        lse = m + np.asarray(be.log(np.asarray(be.sum_rows(e))))
    return o, p, lse


def attention_backward(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """SDPA backward (causal): the backend's attention_backward with p from the forward (kept or recomputed);
    on cpu, with none kept, kernels/cpu_attention_recompute.py's, which never holds p whole: the same bits."""
    q, k, v = _heads(name, a["query"], a["key"], a["value"])
    _check_attention_args(name, a, q.shape[2])
    p = ctx.take_attention(a["query"], a["key"], a["out"])
    do = host(a["grad_out"]).reshape(q.shape)
    if ctx.cpu and p is None:  # p recomputed a block of rows at a time, never whole
        dq, dk, dv = cpu_lab.attention_backward_recomputed(q, k, v, do, ctx.fused)
    elif ctx.cpu:  # p is the forward's own: its masked entries are +0.0
        dq, dk, dv = cpu_lab.attention_backward_of_own_p(q, k, v, np.asarray(p), do, ctx.fused)
    else:
        if p is None:
            _, p = ctx.be.attention(q, k, v)
        dq, dk, dv = ctx.be.attention_backward(q, k, v, np.asarray(p), do)
    g = _groups(name, a["query"], a["key"], a["value"])
    kv_shape = tuple(a["key"].shape)
    return (
        wrap(np.asarray(dq).reshape(tuple(a["query"].shape))),
        wrap(_fold_groups(ctx, np.asarray(dk), kv_shape, g)),
        wrap(_fold_groups(ctx, np.asarray(dv), kv_shape, g)),
    )


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _nll_args(name: str, a: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    if a.get("weight") is not None:
        raise refused(name, "class weights (the table has unweighted nll_loss)")
    logp, target = view(a["self"]), view(a["target"])
    if logp.ndim != 2 or target.ndim != 1 or target.dtype != np.int64:
        raise refused(name, f"input {logp.shape} and target {target.shape} {target.dtype} (want (N, V), int64 (N,))")
    kept = target != a["ignore_index"]
    if np.any(kept & ((target < 0) | (target >= logp.shape[1]))):
        raise refused(name, f"a target outside [0, {logp.shape[1]})")
    return logp, target, kept, _REDUCTIONS[a["reduction"]]


def nll_loss(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """loss_i = -logp[i, t_i] (-0.0 where ignored); mean: psum(loss) / float32(count); sum: psum(loss)."""
    logp, target, kept, reduction = _nll_args(name, a)
    rows = np.arange(logp.shape[0])
    picked = np.where(kept, -logp[rows, np.where(kept, target, 0)], F32(-0.0)).astype(F32)
    count = F32(int(kept.sum()))
    if reduction == "none":
        return wrap(np.where(kept, picked, F32(0.0)).astype(F32)), wrap(np.array(count))
    total = np.asarray(ctx.be.sum_rows(np.ascontiguousarray(picked.reshape(1, -1))))[0]
    with np.errstate(all="ignore"):
        loss = total / count if reduction == "mean" else total
    return wrap(np.array(loss, dtype=F32)), wrap(np.array(count, dtype=F32))


def nll_loss_backward(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """dlogp[i, t_i] = -(g / total_weight) (mean) or -g (sum), +0.0 elsewhere; g the 0-d grad_output."""
    logp, target, kept, reduction = _nll_args(name, a)
    g = host(a["grad_output"])
    if reduction == "none" or g.size != 1:
        raise refused(name, "reduction='none' in backward (the table has mean and sum)")
    with np.errstate(all="ignore"):
        value = g.reshape(()) / host(a["total_weight"]).reshape(()) if reduction == "mean" else g.reshape(())
    if ctx.cpu:  # the same array, its rows (hundreds of MB at a large vocabulary) written on every thread
        return wrap(cpu_lab.one_hot(logp.shape, np.where(kept, target, -1), -F32(value)))
    out = np.zeros(logp.shape, dtype=F32)
    rows = np.nonzero(kept)[0]
    out[rows, target[rows]] = -F32(value)
    return wrap(out)


def embedding(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """table[idx] (section 4.5), any index shape."""
    idx = host(a["indices"])
    table = host(a["weight"])
    return wrap(np.asarray(ctx.be.embedding(table, idx.reshape(-1))).reshape(idx.shape + table.shape[1:]))


def embedding_backward(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """The scatter-add in token order (section 4.5); no padding_idx, no scale_grad_by_freq."""
    if a["padding_idx"] != -1 or a["scale_grad_by_freq"]:
        raise refused(name, "padding_idx or scale_grad_by_freq (the table has the plain scatter-add)")
    idx = host(a["indices"]).reshape(-1)
    dout = host(a["grad_output"])
    dout2 = dout.reshape(idx.shape[0], -1)
    return wrap(np.asarray(ctx.be.embedding_backward(idx, np.ascontiguousarray(dout2), int(a["num_weights"]))))


NN: dict[str, Handler] = {
    "aten.mm.default": mm,
    "aten.bmm.default": mm,
    "aten.addmm.default": addmm,
    "aten._scaled_dot_product_flash_attention_for_cpu.default": attention,
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": attention_backward,
    "aten.nll_loss_forward.default": nll_loss,
    "aten.nll_loss_backward.default": nll_loss_backward,
    "aten.embedding.default": embedding,
    "aten.embedding_dense_backward.default": embedding_backward,
}
