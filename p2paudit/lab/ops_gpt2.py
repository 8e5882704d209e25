"""Op table 1's entries for the GPT-2 family: LayerNorm, GELU's tanh form, tanh (docs/arithmetic.md section 8.8).

LayerNorm over the trailing `normalized_shape` dims (flattened to C), per row:

    mean = psum(x) / C ; d = x - mean ; rstd = 1 / sqrt(psum(d * d) / C + eps)
    xhat = d * rstd ; y = xhat * w + b                     (w, b optional; each op rounded once)

and its backward, with xhat recomputed from the forward's mean and rstd (the same bits):

    dw = psum over rows of dy * xhat ; db = psum over rows of dy ; g = dy * w
    dx = ((g - psum(g) / C) - xhat * (psum(g * xhat) / C)) * rstd
"""

from __future__ import annotations

from typing import Any

import numpy as np

from p2paudit.lab.context import Handler, OpContext
from p2paudit.lab.convert import F32, host, wrap
from p2paudit.lab.ops_elementwise import lab_unary
from p2paudit.lab.refusal import refused


def _rows(name: str, x: np.ndarray, normalized: list[int]) -> tuple[np.ndarray, int]:
    n = len(normalized)
    if n == 0 or tuple(x.shape[x.ndim - n :]) != tuple(normalized):
        raise refused(name, f"normalized_shape {normalized} for an input of shape {x.shape}")
    c = int(np.prod(normalized))
    return x.reshape(-1, c), c


def _stat_shape(x: np.ndarray, n: int) -> tuple[int, ...]:
    return tuple(x.shape[: x.ndim - n]) + (1,) * n


def layer_norm(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """native_layer_norm(x, normalized_shape, w, b, eps) -> (y, mean, rstd)."""
    x = host(a["input"])
    x2, c = _rows(name, x, list(a["normalized_shape"]))
    eps = F32(a["eps"])
    be = ctx.be
    with np.errstate(all="ignore"):
        mean = np.asarray(be.sum_rows(x2)) / F32(c)  # (R,)
        d = np.ascontiguousarray(x2 - mean[:, None])
        rstd = F32(1.0) / np.sqrt(np.asarray(be.sum_rows(np.ascontiguousarray(d * d))) / F32(c) + eps)
        y = d * rstd[:, None]
        if a.get("weight") is not None:
            y = y * host(a["weight"]).reshape(1, c)
        if a.get("bias") is not None:
            y = y + host(a["bias"]).reshape(1, c)
    n = len(a["normalized_shape"])
    stat = _stat_shape(x, n)
    return wrap(y.reshape(x.shape)), wrap(mean.reshape(stat)), wrap(rstd.astype(F32).reshape(stat))


def layer_norm_backward(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """native_layer_norm_backward(dy, x, normalized_shape, mean, rstd, w, b, mask) -> (dx, dw, db)."""
    x = host(a["input"])
    x2, c = _rows(name, x, list(a["normalized_shape"]))
    dy = host(a["grad_out"]).reshape(x2.shape)
    mean, rstd = host(a["mean"]).reshape(-1), host(a["rstd"]).reshape(-1)
    be = ctx.be
    w = host(a["weight"]).reshape(1, c) if a.get("weight") is not None else None
    mask = list(a["output_mask"])
    with np.errstate(all="ignore"):
        xhat = np.ascontiguousarray((x2 - mean[:, None]) * rstd[:, None])
        dx = dw = db = None
        if mask[0]:
            g = np.ascontiguousarray(dy * w if w is not None else dy)
            ga = np.asarray(be.sum_rows(g)) / F32(c)
            gc = np.asarray(be.sum_rows(np.ascontiguousarray(g * xhat))) / F32(c)
            dx = wrap((((g - ga[:, None]) - xhat * gc[:, None]) * rstd[:, None]).reshape(x.shape))
        if mask[1] and w is not None:
            dw = wrap(np.asarray(be.sum_cols(np.ascontiguousarray(dy * xhat))).reshape(a["weight"].shape))
        if mask[2] and a.get("bias") is not None:
            db = wrap(np.asarray(be.sum_cols(np.ascontiguousarray(dy))).reshape(a["bias"].shape))
    return dx, dw, db


def _check_tanh_form(name: str, a: dict[str, Any]) -> None:
    if a.get("approximate") != "tanh":
        raise refused(name, f"approximate={a.get('approximate')!r} (the table has GELU's tanh form; erf is not in it)")


def gelu(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """gelu(x, approximate='tanh'): lab_math.gelu_tanh."""
    _check_tanh_form(name, a)
    return wrap(ctx.math.gelu_tanh(host(a["self"])))


def gelu_backward(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """gelu_backward(dy, x, approximate='tanh'): lab_math.gelu_tanh_backward."""
    _check_tanh_form(name, a)
    return wrap(ctx.math.gelu_tanh_backward(host(a["self"]), host(a["grad_output"])))


def tanh_backward(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """tanh_backward(dy, y): dy * (1 - y * y)."""
    dy, y = host(a["grad_output"]), host(a["output"])
    with np.errstate(all="ignore"):
        return wrap(np.asarray(dy * (F32(1.0) - y * y), dtype=F32))


GPT2: dict[str, Handler] = {
    "aten.native_layer_norm.default": layer_norm,
    "aten.native_layer_norm_backward.default": layer_norm_backward,
    "aten.gelu.default": gelu,
    "aten.gelu_backward.default": gelu_backward,
    "aten.tanh.default": lab_unary("tanh"),
    "aten.tanh_backward.default": tanh_backward,
}
