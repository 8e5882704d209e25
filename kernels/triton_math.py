"""Triton device functions of docs/arithmetic.md: exp, log, max2 and the halving trees.

Everything here is a `@triton.jit` helper inlined into the kernels of
kernels/triton_kernels.py. Only rounded + - * /, `div_rn`, `sqrt_rn`, selects
and int32 bit casts are used, so the same code is exact under the CUDA
compiler (with enable_fp_fusion=False) and under TRITON_INTERPRET=1, which
evaluates each operation with a numpy float32 ufunc.

Importing this module (or any kernels.triton_* module) needs CUDA or
TRITON_INTERPRET=1: `triton.jit` decides at decoration time whether a kernel
is compiled or interpreted, so the check has to happen before that.
"""

from __future__ import annotations

import os

import torch

COMPILE_ONLY_ENV = "P2PAUDIT_TRITON_COMPILE_ONLY"


def require_triton_device() -> str:
    """Return "interpret", "cuda" or "compile", or raise ImportError if none applies.

    TRITON_INTERPRET=1 wins over CUDA, so tests run the interpreter everywhere.
    "compile" (P2PAUDIT_TRITON_COMPILE_ONLY=1, no CUDA) builds real Triton
    kernels that can be compiled for a GPU target (kernels/triton_ptx.py) but
    never launched; kernels.triton_backend refuses to import in that mode.
    """
    if os.environ.get("TRITON_INTERPRET", "") == "1":
        return "interpret"
    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get(COMPILE_ONLY_ENV, "") == "1":
        return "compile"
    raise ImportError(
        "triton backend needs CUDA or TRITON_INTERPRET=1 (no CUDA device found and TRITON_INTERPRET is not 1)"
    )


MODE = require_triton_device()

import triton  # noqa: E402  (after the device check, which decides how kernels are built)
import triton.language as tl  # noqa: E402

from kernels import constants as K  # noqa: E402


def _c(value) -> tl.constexpr:
    """A float32 constant as a Triton constexpr (the value is exact in float32)."""
    return tl.constexpr(float(value))


# Every constant is an exactly representable normal float32 (or 0/inf), so the
# compiler's float literal and the interpreter's np.float32 hold the same bits.
EXP_HI = _c(K.EXP_HI)
EXP_LO = _c(K.EXP_LO)
LOG2E = _c(K.LOG2E)
LN2_HI = _c(K.LN2_HI)
LN2_LO = _c(K.LN2_LO)
SHIFTER = _c(K.SHIFTER)
C2, C3, C4, C5, C6, C7 = (_c(c) for c in (K.C2, K.C3, K.C4, K.C5, K.C6, K.C7))
SQRT2 = _c(K.SQRT2)
TWO23 = _c(K.TWO23)
MIN_NORMAL = _c(K.MIN_NORMAL)
L3, L5, L7, L9, L11 = (_c(c) for c in (K.L3, K.L5, K.L7, K.L9, K.L11))
POS_INF = tl.constexpr(float("inf"))
NEG_INF = tl.constexpr(float("-inf"))
NAN = tl.constexpr(float("nan"))


@triton.jit
def max2(a, b):
    """max2(a, b) = NaN if either is NaN; b if b > a; a otherwise (section 2.2)."""
    return tl.where((b > a) | (b != b), b, a)


@triton.jit
def pow2(k):
    """2^k as float32 from its exponent bits. Precondition: -126 <= k <= 127 (int32)."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def exp_f32(x):
    """exp of section 3.1, elementwise on a float32 tensor."""
    inside = (x >= EXP_LO) & (x <= EXP_HI)
    xc = tl.where(inside, x, 0.0)  # out-of-range lanes are replaced at the end
    t = xc * LOG2E
    n = (t + SHIFTER) - SHIFTER  # round to nearest integer, ties to even
    r = (xc - n * LN2_HI) - n * LN2_LO
    q = r * C7 + C6  # (q * r) rounds, then + rounds: fusion is off at launch
    q = q * r + C5
    q = q * r + C4
    q = q * r + C3
    q = q * r + C2
    p = 1.0 + (r + (r * r) * q)  # amendment of 2026-11-29: monotone, unlike Horner through 1.0
    ni = n.to(tl.int32)  # exact: |n| <= 150
    n1 = ni >> 1  # arithmetic shift = floor(n / 2)
    n2 = ni - n1
    y = (p * pow2(n1)) * pow2(n2)  # first product exact, second rounds once
    y = tl.where(x > EXP_HI, POS_INF, y)
    y = tl.where(x < EXP_LO, 0.0, y)
    return tl.where(x != x, x, y)


@triton.jit
def log_f32(x):
    """Natural log of section 3.2, elementwise on a float32 tensor."""
    finite_pos = (x > 0.0) & (x < POS_INF)
    xc = tl.where(finite_pos, x, 1.0)  # special lanes are replaced at the end
    sub = xc < MIN_NORMAL
    xs = tl.where(sub, xc * TWO23, xc)  # exact rescale of subnormals
    bits = xs.to(tl.int32, bitcast=True)
    e = ((bits >> 23) & 0xFF) - 127 - tl.where(sub, 23, 0)
    m = ((bits & 0x7FFFFF) | 0x3F800000).to(tl.float32, bitcast=True)  # m in [1, 2)
    big = m > SQRT2
    m = tl.where(big, m * 0.5, m)
    e = e + big.to(tl.int32)
    f = m - 1.0  # exact
    s = tl.math.div_rn(f, 2.0 + f)
    z = s * s
    q = z * L11 + L9
    q = q * z + L7
    q = q * z + L5
    q = q * z + L3
    q = q * z
    u = s + s
    lm = u + u * q
    ef = e.to(tl.float32)  # |e| <= 149: exact
    y = ef * LN2_HI + (ef * LN2_LO + lm)
    y = tl.where(x == POS_INF, POS_INF, y)
    y = tl.where(x == 0.0, NEG_INF, y)  # either sign of zero
    return tl.where((x != x) | (x < 0.0), NAN, y)


@triton.jit
def combine(a, b, IS_MAX: tl.constexpr):
    """One node of a tree: a + b, or max2(a, b)."""
    if IS_MAX:
        return max2(a, b)
    else:
        return a + b


@triton.jit
def halve_last(x, IS_MAX: tl.constexpr):
    """(R, 2W) -> (R, W): out[:, i] = combine(x[:, i], x[:, i + W]), one tree level."""
    R: tl.constexpr = x.shape[0]
    W: tl.constexpr = x.shape[1] // 2
    pairs = tl.permute(tl.reshape(x, (R, 2, W)), (0, 2, 1))  # (R, W, 2): [.., 0] = x[:, i], [.., 1] = x[:, i + W]
    lo, hi = tl.split(pairs)  # (R, W) each
    return combine(lo, hi, IS_MAX)


@triton.jit
def halve_first(x, IS_MAX: tl.constexpr):
    """(2G, W) -> (G, W): out[j, :] = combine(x[j, :], x[j + G, :]), one tree level."""
    G: tl.constexpr = x.shape[0] // 2
    W: tl.constexpr = x.shape[1]
    pairs = tl.permute(tl.reshape(x, (2, G, W)), (1, 2, 0))  # (G, W, 2)
    lo, hi = tl.split(pairs)  # (G, W) each
    return combine(lo, hi, IS_MAX)


@triton.jit
def tree_last(x, LOG2W: tl.constexpr, IS_MAX: tl.constexpr):
    """Halving tree over the last axis of x (R, 2^LOG2W) -> (R,). Padding is the caller's."""
    R: tl.constexpr = x.shape[0]
    for _ in tl.static_range(LOG2W):
        x = halve_last(x, IS_MAX)
    return tl.reshape(x, (R,))


@triton.jit
def tree_first(x, LOG2G: tl.constexpr, IS_MAX: tl.constexpr):
    """Halving tree over the first axis of x (2^LOG2G, W) -> (W,). Padding is the caller's."""
    W: tl.constexpr = x.shape[1]
    for _ in tl.static_range(LOG2G):
        x = halve_first(x, IS_MAX)
    return tl.reshape(x, (W,))
