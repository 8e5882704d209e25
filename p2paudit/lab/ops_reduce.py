"""Op table 1's reductions: sums, means, norms, softmax and log-softmax along dims, all on the pairwise trees.

The order (docs/arithmetic.md section 8): the reduced axes are moved
last (kept axes first, each group in increasing axis order), flattened in C
order, and each resulting row is one `psum` (section 2.1) or `pmax` (2.2)
through the backend's sum_rows / max_rows. So a sum over (0, 1) of a
(B, T, C) tensor is one pairwise tree over the B*T values of each column,
taken in (b, t) order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kernels import cpu_lab  # the cpu backend's fused entries (numba)
from p2paudit.lab.context import Handler, OpContext
from p2paudit.lab.convert import F32, dims_of, host, view, wrap
from p2paudit.lab.refusal import refused


def _rows(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...], int]:
    """x with `axes` moved last as a C-contiguous (R, C) array, the kept shape, and C."""
    kept = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, kept + list(axes)) if x.ndim else x
    kept_shape = tuple(x.shape[d] for d in kept)
    c = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    r = int(np.prod(kept_shape, dtype=np.int64))
    return np.ascontiguousarray(moved).reshape(r, c), kept_shape, c


def _keep(out: np.ndarray, shape: tuple[int, ...], axes: tuple[int, ...], keepdim: bool) -> np.ndarray:
    if not keepdim:
        return out
    full = [1 if d in axes else shape[d] for d in range(len(shape))]
    return out.reshape(full)


def psum_axes(ctx: OpContext, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """The pairwise sum over `axes` (reduced axes flattened in C order), shape of the kept axes.

    Leading axes of a C-contiguous x (a bias or norm weight's gradient, summed over (B, T)) are the same psums
    down the columns of x seen as (reduced, kept): sum_cols, without moving the axes last (a copy).
    """
    if axes and axes == tuple(range(len(axes))) and len(axes) < x.ndim and x.flags.c_contiguous and x.size:
        kept_shape = x.shape[len(axes) :]
        cols = np.asarray(ctx.be.sum_cols(x.reshape(-1, int(np.prod(kept_shape)))))  # (kept,)
        return cols.reshape(kept_shape)
    rows, kept_shape, c = _rows(x, axes)
    if rows.shape[0] == 0:
        return np.zeros(kept_shape, dtype=F32)
    if c == 0:
        return np.zeros(kept_shape, dtype=F32)  # psum of nothing is +0.0
    return np.asarray(ctx.be.sum_rows(rows)).reshape(kept_shape)


def _float_input(name: str, t: object) -> np.ndarray:
    x = view(t)  # type: ignore[arg-type]
    if x.dtype != np.float32:
        raise refused(name, f"a {x.dtype} input (sums are float32 here)")
    return x


def sum_dims(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """aten.sum.dim_IntList / sum.default: psum over the dims (all when none are given)."""
    if a.get("dtype") is not None:
        raise refused(name, f"dtype={a['dtype']} (sums stay float32)")
    x = _float_input(name, a["self"])
    axes = dims_of(a.get("dim"), x.ndim) if x.ndim else ()
    out = psum_axes(ctx, x, axes) if x.ndim else x.copy()
    return wrap(_keep(out, x.shape, axes, bool(a.get("keepdim"))))


def mean_dims(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """psum over the dims, then one division by float32(count)."""
    if a.get("dtype") is not None:
        raise refused(name, f"dtype={a['dtype']} (means stay float32)")
    x = _float_input(name, a["self"])
    axes = dims_of(a.get("dim"), x.ndim) if x.ndim else ()
    count = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    s = psum_axes(ctx, x, axes) if x.ndim else x.copy()
    with np.errstate(all="ignore"):
        out = s / F32(count)
    return wrap(_keep(np.asarray(out, dtype=F32), x.shape, axes, bool(a.get("keepdim"))))


def norm2(ctx: OpContext, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """sqrt(psum(x * x)) over `axes`: the one 2-norm of the table."""
    whole = cpu_lab.square_sum(x) if ctx.cpu and x.ndim and axes == tuple(range(x.ndim)) else None
    with np.errstate(all="ignore"):
        if whole is not None:  # one large tensor's squares and tree on every thread: the same bits
            return np.asarray(np.sqrt(whole), dtype=F32)
        sq = np.asarray(x * x, dtype=F32)
        return np.asarray(np.sqrt(psum_axes(ctx, sq, axes) if x.ndim else sq), dtype=F32)


def _check_ord(name: str, ord_: object) -> None:
    if ord_ != 2:
        raise refused(name, f"ord={ord_!r} (the table's norm is the 2-norm)")


def vector_norm(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """aten.linalg_vector_norm(x, 2, dim, keepdim): norm2 over dim (all when None)."""
    _check_ord(name, a["ord"])
    if a.get("dtype") is not None:
        raise refused(name, f"dtype={a['dtype']}")
    x = _float_input(name, a["self"])
    axes = dims_of(a.get("dim"), x.ndim) if x.ndim else ()
    return wrap(_keep(norm2(ctx, x, axes), x.shape, axes, bool(a.get("keepdim"))))


def foreach_norm(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """aten._foreach_norm.Scalar(tensors, 2): norm2 of each tensor, flattened, as 0-d tensors."""
    _check_ord(name, a["ord"])
    out = []
    for t in a["self"]:
        x = _float_input(name, t)
        out.append(wrap(norm2(ctx, x, tuple(range(x.ndim)))))
    return out


def _last_dim(name: str, x: np.ndarray, dim: int) -> np.ndarray:
    """x as (R, C) rows over `dim`, which must be the last axis."""
    if x.ndim == 0 or dim % x.ndim != x.ndim - 1:
        raise refused(name, f"dim={dim} of a {x.ndim}-d tensor (the table reduces over the last dim)")
    return np.ascontiguousarray(x).reshape(-1, x.shape[-1])


def _softmax_parts(ctx: OpContext, x2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """m = pmax(row), e = exp(x - m), s = psum(e): the first lines of section 4.4."""
    m = np.asarray(ctx.be.max_rows(x2))
    with np.errstate(all="ignore"):
        e = np.asarray(ctx.be.exp(np.ascontiguousarray(x2 - m[:, None])))
    return m, e, np.asarray(ctx.be.sum_rows(e))


def softmax(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """aten._softmax(x, dim, half_to_float): e / s per row."""
    x = _float_input(name, a["self"])
    x2 = _last_dim(name, x, a["dim"])
    _, e, s = _softmax_parts(ctx, x2)
    with np.errstate(all="ignore"):
        return wrap((e / s[:, None]).reshape(x.shape))


def softmax_backward(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """dx = y * (dy - psum(y * dy)) per row (section 4.1's backward, unmasked)."""
    y = _last_dim(name, host(a["output"]), a["dim"])
    dy = _last_dim(name, host(a["grad_output"]), a["dim"])
    with np.errstate(all="ignore"):
        c = np.asarray(ctx.be.sum_rows(np.ascontiguousarray(y * dy)))
        return wrap((y * (dy - c[:, None])).reshape(view(a["output"]).shape))


def log_softmax(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """aten._log_softmax(x, dim): x - (m + log(s)) per row (section 4.4's lse); one fused pass on cpu."""
    x = _float_input(name, a["self"])
    x2 = _last_dim(name, x, a["dim"])
    if ctx.cpu and x2.shape[1] >= 1:
        return wrap(cpu_lab.log_softmax(x2).reshape(x.shape))
    m, _, s = _softmax_parts(ctx, x2)
    with np.errstate(all="ignore"):
        lse = m + np.asarray(ctx.be.log(s))
        return wrap((x2 - lse[:, None]).reshape(x.shape))


def log_softmax_backward(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """dx = dy - exp(y) * psum(dy) per row, y the log-softmax output; one fused pass on cpu."""
    y = _last_dim(name, host(a["output"]), a["dim"])
    dy = _last_dim(name, host(a["grad_output"]), a["dim"])
    if ctx.cpu and y.dtype == dy.dtype == np.float32:
        return wrap(cpu_lab.log_softmax_backward(y, dy).reshape(view(a["output"]).shape))
    c = np.asarray(ctx.be.sum_rows(dy))
    with np.errstate(all="ignore"):
        return wrap((dy - np.asarray(ctx.be.exp(y)) * c[:, None]).reshape(view(a["output"]).shape))


def amax(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """aten.amax(x, dim, keepdim): pmax over the last dim."""
    x = _float_input(name, a["self"])
    dims = dims_of(a.get("dim"), x.ndim)
    if dims != (x.ndim - 1,):
        raise refused(name, f"dim={a.get('dim')} (the table's amax reduces the last dim)")
    out = np.asarray(ctx.be.max_rows(_last_dim(name, x, -1))).reshape(x.shape[:-1])
    return wrap(_keep(out, x.shape, dims, bool(a.get("keepdim"))))


REDUCTIONS: dict[str, Handler] = {
    "aten.sum.dim_IntList": sum_dims,
    "aten.sum.default": sum_dims,
    "aten.mean.dim": mean_dims,
    "aten.mean.default": mean_dims,
    "aten.linalg_vector_norm.default": vector_norm,
    "aten._foreach_norm.Scalar": foreach_norm,
    "aten._softmax.default": softmax,
    "aten._softmax_backward_data.default": softmax_backward,
    "aten._log_softmax.default": log_softmax,
    "aten._log_softmax_backward_data.default": log_softmax_backward,
    "aten.amax.default": amax,
}
