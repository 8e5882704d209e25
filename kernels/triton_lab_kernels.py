"""Triton kernels of op table 1's elementwise functions (docs/arithmetic.md section 8, kernels/lab_math.py).

sin, cos, tanh, GELU's tanh form and its derivative, rsqrt, reciprocal,
sigmoid and exp(x * c) (pow with a scalar base): the operations of
kernels/lab_math.py in the same order, one rounding each. Only rounded
+ - * (fusion off at launch: kernels/triton_launch.py), `div_rn`, `sqrt_rn`,
the exp of kernels/triton_math.py, selects, negation, abs and int32 bit
casts; no library transcendental and no fma (section 8 is the same in
arithmetic versions 1 and 2: version 2 fuses only the dot products' fold).
Every constant is a float32 value written exactly, so the compiled kernel's
literal and the interpreter's np.float32 hold the same bits.
"""

from __future__ import annotations

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from kernels import constants as K  # noqa: E402
from kernels import lab_math as LM  # noqa: E402
from kernels.triton_math import _c, exp_f32  # its import checks the device, before any @triton.jit here

SHIFTER = _c(K.SHIFTER)
TWO_OVER_PI = _c(LM.TWO_OVER_PI)
PIO2_1, PIO2_2, PIO2_3, PIO2_4 = (_c(c) for c in (LM.PIO2_1, LM.PIO2_2, LM.PIO2_3, LM.PIO2_4))
TRIG_LIMIT = _c(LM.TRIG_LIMIT)
S11, S9, S7, S5, S3 = (_c(c) for c in LM.SIN_C)
C12, C10, C8, C6, C4 = (_c(c) for c in LM.COS_C)
TANH_SPLIT = _c(LM.TANH_SPLIT)
T5, T4, T3, T2, T1, T0 = (_c(c) for c in LM.TANH_C)
GELU_K0, GELU_K1, GELU_K3 = _c(LM.GELU_K0), _c(LM.GELU_K1), _c(LM.GELU_K3)

# The OP codes of lab_unary_kernel.
SIN, COS, TANH, GELU, RSQRT, RECIPROCAL, SIGMOID, EXP_SCALED = range(8)


@triton.jit
def trig_f32(x, SHIFT: tl.constexpr):
    """sin(x) (SHIFT 0) or cos(x) (SHIFT 1) of section 8.3: NaN where not |x| <= 65536."""
    bad = ~(tl.abs(x) <= TRIG_LIMIT)  # NaN compares false: bad too
    xc = tl.where(bad, 0.0, x)
    t = xc * TWO_OVER_PI
    n = (t + SHIFTER) - SHIFTER  # nearest integer, ties to even
    r = (((xc - n * PIO2_1) - n * PIO2_2) - n * PIO2_3) - n * PIO2_4
    z = r * r
    q = z * S11 + S9  # each step two roundings: fusion is off at launch
    q = q * z + S7
    q = q * z + S5
    q = q * z + S3
    s = r + (r * z) * q
    p = z * C12 + C10
    p = p * z + C8
    p = p * z + C6
    p = p * z + C4
    c = 1.0 - (z * 0.5 - (z * z) * p)
    k = (n.to(tl.int32) + SHIFT) & 3  # |n| <= 2^16: exact; two's complement & 3 is n mod 4
    y = tl.where((k & 1) == 0, s, c)
    y = tl.where(k >= 2, -y, y)
    return tl.where(bad, float("nan"), y)  # inline: Triton's check of a global constexpr compares nan != nan


@triton.jit
def tanh_f32(x):
    """tanh of section 8.8: the fitted odd polynomial below 0.625, 1 - 2 / (exp(2a) + 1) above; x's sign."""
    a = tl.abs(x)
    z = a * a
    q = z * T5 + T4
    q = q * z + T3
    q = q * z + T2
    q = q * z + T1
    q = q * z + T0
    small = a + (a * z) * q
    big = 1.0 - tl.math.div_rn(2.0, exp_f32(a * 2.0) + 1.0)
    y = tl.abs(tl.where(a < TANH_SPLIT, small, big))
    y = tl.where(x.to(tl.int32, bitcast=True) < 0, -y, y)  # copysign: x's sign bit on |y|, exact
    return tl.where(x != x, x, y)


@triton.jit
def gelu_inner(x, x2):
    """K0 (x + K1 ((x x) x)), the argument of GELU's tanh; x2 = x * x (constants on the right: a product is
    commutative, and a constexpr on the left would not make a tensor in the interpreter)."""
    return (x + (x2 * x) * GELU_K1) * GELU_K0


@triton.jit
def lab_unary_kernel(x_ptr, y_ptr, c_ptr, numel, OP: tl.constexpr, BLOCK: tl.constexpr):
    """y = f(x) elementwise, f by OP; EXP_SCALED reads its float32 c from c_ptr[0]: y = exp(x * c)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < numel, other=0.0)
    if OP == 0:
        y = trig_f32(x, 0)
    elif OP == 1:
        y = trig_f32(x, 1)
    elif OP == 2:
        y = tanh_f32(x)
    elif OP == 3:
        y = (0.5 * x) * (1.0 + tanh_f32(gelu_inner(x, x * x)))
    elif OP == 4:
        y = tl.math.div_rn(1.0, tl.math.sqrt_rn(x))
    elif OP == 5:
        y = tl.math.div_rn(1.0, x)
    elif OP == 6:
        y = tl.math.div_rn(1.0, 1.0 + exp_f32(-x))
    else:
        y = exp_f32(x * tl.load(c_ptr))
    tl.store(y_ptr + offs, y, mask=offs < numel)


@triton.jit
def gelu_backward_kernel(x_ptr, dy_ptr, dx_ptr, numel, BLOCK: tl.constexpr):
    """dx = dy (0.5 (1 + t) + ((0.5 x) (1 - t t)) (K0 (1 + K3 x x))), t the forward's tanh (section 8.8)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < numel, other=0.0)
    dy = tl.load(dy_ptr + offs, mask=offs < numel, other=0.0)
    x2 = x * x
    t = tanh_f32(gelu_inner(x, x2))
    left = 0.5 * (1.0 + t)
    right = ((0.5 * x) * (1.0 - t * t)) * ((1.0 + x2 * GELU_K3) * GELU_K0)
    tl.store(dx_ptr + offs, dy * (left + right), mask=offs < numel)
