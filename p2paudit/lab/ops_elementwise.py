"""Op table 1's elementwise entries: + - * / with broadcasting, the unary functions, pow, clamp, max/min.

Every float result is one rounded float32 operation per element (or the
composition docs/arithmetic.md section 8 gives); Python scalars are
rounded once to float32 first (section 1); bool and small-integer operands
convert to float32 exactly; integer-only arithmetic stays int64 (exact).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from kernels import cpu_lab  # the cpu backend's fused entries (numba)
from p2paudit.lab.context import Handler, OpContext
from p2paudit.lab.convert import F32, as_float32, host, operand, scalar32, view, wrap
from p2paudit.lab.refusal import refused

Binary = Callable[[Any, Any], Any]


def _is_float(x: object) -> bool:
    return isinstance(x, np.float32) or (isinstance(x, np.ndarray) and x.dtype.kind == "f")


def _floatify(name: str, x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return as_float32(name, x)
    return scalar32(name, x, "a scalar operand") if not isinstance(x, np.float32) else x


def _max2(a: Any, b: Any) -> Any:
    """b if b > a else a, NaN if either is NaN (section 2.2's max2, elementwise)."""
    return np.where(np.isnan(a) | np.isnan(b), F32(np.nan), np.where(b > a, b, a))


def _min2(a: Any, b: Any) -> Any:
    return np.where(np.isnan(a) | np.isnan(b), F32(np.nan), np.where(b < a, b, a))


_THREADED: dict[Any, int] = {
    np.add: cpu_lab.ADD,
    np.subtract: cpu_lab.SUBTRACT,
    np.multiply: cpu_lab.MULTIPLY,
    np.divide: cpu_lab.DIVIDE,
}  # ufunc -> its operation in kernels/cpu_lab.binary (threaded)


def _apply(ctx: OpContext, name: str, fn: Binary, a: object, b: object, *, true_div: bool = False) -> np.ndarray:
    x, y = operand(name, a), operand(name, b)
    if true_div or _is_float(x) or _is_float(y):
        x, y = _floatify(name, x), _floatify(name, y)
    op = _THREADED.get(fn) if ctx.cpu else None
    if op is not None and isinstance(x, (np.ndarray, np.float32)) and isinstance(y, (np.ndarray, np.float32)):
        out = cpu_lab.binary(x, y, op)  # broadcast or strided, threaded
        if out is not None:
            return out
    return np.asarray(fn(x, y))  # numpy's warnings are off under the mode (CanonicalMode.__enter__)


def _alpha(name: str, fn: Binary, bound: dict[str, Any]) -> Binary:
    """fn(a, alpha * b): alpha == 1 is fn(a, b) (no multiplication)."""
    alpha = bound.get("alpha", 1)
    if alpha is None or alpha == 1:
        return fn
    f_alpha = scalar32(name, alpha, "alpha")
    return lambda a, b: fn(a, b * (f_alpha if _is_float(b) or _is_float(a) else alpha))


def binary(fn: Binary, *, true_div: bool = False, reverse: bool = False, inplace: bool = False) -> Handler:
    """An entry for fn(self, other [, alpha]); `reverse`: fn(other, self) (rsub); `inplace`: into self."""

    def entry(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
        if a.get("rounding_mode") is not None:
            raise refused(name, f"rounding_mode={a['rounding_mode']!r} (only true division is in the table)")
        f = _alpha(name, fn, a)
        lhs, rhs = (a["other"], a["self"]) if reverse else (a["self"], a["other"])
        out = _apply(ctx, name, f, lhs, rhs, true_div=true_div)
        if not inplace:
            return wrap(out)
        target: torch.Tensor = a["self"]
        if out.dtype != view(target).dtype:
            raise refused(name, f"an in-place result of dtype {out.dtype} into a {target.dtype} tensor")
        view(target)[...] = out
        return target

    return entry


def unary(fn: Callable[[np.ndarray], np.ndarray]) -> Handler:
    """An entry for fn(self) on a float32 tensor (the kernels' functions want C-contiguous float32)."""

    def entry(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
        x = host(a["self"])
        if x.dtype != np.float32:
            raise refused(name, f"a {x.dtype} input (this entry computes on float32)")
        with np.errstate(all="ignore"):
            return wrap(fn(x))

    return entry


def lab_unary(fn_name: str) -> Handler:
    """An entry for the backend's lab function `fn_name` (kernels/lab_math.py's list: sin, cos, tanh, ...)."""

    def entry(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
        return unary(getattr(ctx.math, fn_name))(ctx, name, a)

    return entry


def backend_unary(fn_name: str) -> Handler:
    """An entry for the backend's own elementwise function `fn_name` (exp, log, silu)."""

    def entry(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
        return unary(getattr(ctx.be, fn_name))(ctx, name, a)

    return entry


def silu_backward(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """aten.silu_backward(grad_output, self): the backend's silu_backward(x, dy) (section 3.3)."""
    return wrap(ctx.be.silu_backward(host(a["self"]), host(a["grad_output"])))


def sigmoid_backward(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """dy * ((1 - y) * y), y the sigmoid's output."""
    dy, y = host(a["grad_output"]), host(a["output"])
    with np.errstate(all="ignore"):
        return wrap(dy * ((F32(1.0) - y) * y))


def pow_tensor_scalar(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """x ** e for e in {0, 1, 0.5, -0.5, -1} or an integer 2..8 (a left fold of products)."""
    e = a["exponent"]
    if view(a["self"]).dtype != np.float32:
        raise refused(name, f"a {view(a['self']).dtype} base")
    if ctx.cpu and isinstance(e, (int, float)) and float(e).is_integer() and 2 <= e <= 8:
        y = cpu_lab.power(view(a["self"]), int(e))  # on every thread, a strided x read in place
        if y is not None:
            return wrap(y)
    x = host(a["self"])
    with np.errstate(all="ignore"):
        if e == 0:
            return wrap(np.ones_like(x))
        if e == 1:
            return wrap(x.copy())
        if e == 0.5:
            return wrap(np.sqrt(x))
        if e == -0.5:
            return wrap(ctx.math.rsqrt(x))
        if e == -1:
            return wrap(ctx.math.reciprocal(x))
        if float(e).is_integer() and 2 <= e <= 8:
            y = x * x
            for _ in range(int(e) - 2):
                y = y * x
            return wrap(y)
    raise refused(name, f"exponent {e!r} (the table has 0, 1, 0.5, -0.5, -1 and the integers 2..8)")


def negative(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """-x, exact (the sign bit flipped); on cpu a large or strided x on every thread, read in place."""
    if ctx.cpu:
        x = view(a["self"])
        if x.dtype != np.float32:
            raise refused(name, f"a {x.dtype} input (this entry computes on float32)")
        y = cpu_lab.binary(x, F32(0.0), cpu_lab.NEGATE)
        if y is not None:
            return wrap(y)
    return unary(np.negative)(ctx, name, a)


def pow_scalar(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """base ** x with a scalar base > 0: exp(x * log(base))."""
    x = host(a["exponent"])
    if x.dtype != np.float32:
        x = as_float32(name, x)
    return wrap(ctx.math.pow_scalar_base(scalar32(name, a["self"], "the base"), x))


def clamp(ctx: OpContext, name: str, a: dict[str, Any]) -> Any:
    """min then max against scalar bounds, exact; NaN stays NaN."""
    x = view(a["self"])
    if x.dtype != np.float32:
        raise refused(name, f"a {x.dtype} input")
    lo, hi = a.get("min"), a.get("max")
    y = np.array(x, copy=True)
    if lo is not None:
        y = np.where(y < scalar32(name, lo, "min"), scalar32(name, lo, "min"), y)
    if hi is not None:
        y = np.where(y > scalar32(name, hi, "max"), scalar32(name, hi, "max"), y)
    return wrap(y.astype(F32))


ADD, SUB, MUL, DIV = np.add, np.subtract, np.multiply, np.divide

ELEMENTWISE: dict[str, Handler] = {
    "aten.add.Tensor": binary(ADD),
    "aten.add.Scalar": binary(ADD),
    "aten.add_.Tensor": binary(ADD, inplace=True),
    "aten.add_.Scalar": binary(ADD, inplace=True),
    "aten.sub.Tensor": binary(SUB),
    "aten.sub.Scalar": binary(SUB),
    "aten.sub_.Tensor": binary(SUB, inplace=True),
    "aten.rsub.Tensor": binary(SUB, reverse=True),
    "aten.rsub.Scalar": binary(SUB, reverse=True),
    "aten.mul.Tensor": binary(MUL),
    "aten.mul.Scalar": binary(MUL),
    "aten.mul_.Tensor": binary(MUL, inplace=True),
    "aten.mul_.Scalar": binary(MUL, inplace=True),
    "aten.div.Tensor": binary(DIV, true_div=True),
    "aten.div.Scalar": binary(DIV, true_div=True),
    "aten.div.Tensor_mode": binary(DIV, true_div=True),
    "aten.div_.Tensor": binary(DIV, true_div=True, inplace=True),
    "aten.div_.Scalar": binary(DIV, true_div=True, inplace=True),
    "aten.maximum.default": binary(_max2),
    "aten.minimum.default": binary(_min2),
    "aten.neg.default": negative,
    "aten.sqrt.default": unary(np.sqrt),
    "aten.rsqrt.default": lab_unary("rsqrt"),
    "aten.reciprocal.default": lab_unary("reciprocal"),
    "aten.sin.default": lab_unary("sin"),
    "aten.cos.default": lab_unary("cos"),
    "aten.sigmoid.default": lab_unary("sigmoid"),
    "aten.sigmoid_backward.default": sigmoid_backward,
    "aten.exp.default": backend_unary("exp"),
    "aten.log.default": backend_unary("log"),
    "aten.silu.default": backend_unary("silu"),
    "aten.silu_backward.default": silu_backward,
    "aten.pow.Tensor_Scalar": pow_tensor_scalar,
    "aten.pow.Scalar": pow_scalar,
    "aten.clamp.default": clamp,
    "aten.clamp_min.default": lambda ctx, name, a: clamp(ctx, name, {"self": a["self"], "min": a["min"]}),
    "aten.clamp_max.default": lambda ctx, name, a: clamp(ctx, name, {"self": a["self"], "max": a["max"]}),
}
