"""Scalar building blocks of the `cpu` backend: bit casts, exp, log, max2, trees.

Every function here is a numba function inlined into the kernels of
kernels/cpu_*.py, so LLVM sees whole loops and vectorises them across
independent outputs. Each follows docs/arithmetic.md operation for operation:
float32 only (constants are numpy.float32 globals, which numba freezes as
float32; a bare Python float literal would promote the expression to float64),
no fastmath, branches written as selects so loops stay vectorisable.

Caching note: numba's on-disk cache of a kernel is keyed on the kernel's own
source file only. After editing this module, delete kernels/__pycache__ (the
`*.nbi`/`*.nbc` files) so the kernels that inline these helpers recompile.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from kernels import constants as K

# numpy.float32 globals: numba types them as float32 constants.
ZERO = K.ZERO
NEG_ZERO = K.NEG_ZERO
ONE = K.ONE
TWO = K.TWO
HALF = K.HALF
POS_INF = K.POS_INF
NEG_INF = K.NEG_INF
NAN = np.float32(np.nan)
EXP_HI = K.EXP_HI
EXP_LO = K.EXP_LO
LOG2E = K.LOG2E
LN2_HI = K.LN2_HI
LN2_LO = K.LN2_LO
SHIFTER = K.SHIFTER
C2, C3, C4, C5, C6, C7 = K.C2, K.C3, K.C4, K.C5, K.C6, K.C7
SQRT2 = K.SQRT2
TWO23 = K.TWO23
MIN_NORMAL = K.MIN_NORMAL
L3, L5, L7, L9, L11 = K.L3, K.L5, K.L7, K.L9, K.L11


@intrinsic
def f32_from_bits(typingctx, bits):
    """Reinterpret the low 32 bits of an integer as a float32 (an LLVM bitcast)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i32 = builder.trunc(args[0], ir.IntType(32)) if bits.bitwidth > 32 else args[0]
        return builder.bitcast(i32, ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def bits_from_f32(typingctx, x):
    """Reinterpret a float32 as an int32 (an LLVM bitcast)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(x), codegen


@njit(inline="always")
def pow2_f32(k):
    """2^k as float32, built from exponent bits. Precondition: -126 <= k <= 127."""
    return f32_from_bits((k + 127) << 23)


@njit(inline="always")
def exp_f32(x):
    """exp of docs/arithmetic.md section 3.1 on one float32."""
    inside = (x >= EXP_LO) & (x <= EXP_HI)  # & not `and`: no branch, so loops vectorise
    xc = x if inside else ZERO  # out-of-range lanes are replaced at the end
    t = xc * LOG2E
    n = (t + SHIFTER) - SHIFTER  # round to the nearest integer, ties to even
    r = (xc - n * LN2_HI) - n * LN2_LO
    p = C7
    p = p * r + C6
    p = p * r + C5
    p = p * r + C4
    p = p * r + C3
    p = p * r + C2
    p = p * r + ONE
    p = p * r + ONE
    ni = np.int32(n)
    n1 = ni >> 1  # arithmetic shift: floor(n / 2)
    n2 = ni - n1
    y = (p * pow2_f32(n1)) * pow2_f32(n2)  # the first scaling is exact, the second rounds once
    y = POS_INF if x > EXP_HI else y
    y = ZERO if x < EXP_LO else y
    return x if x != x else y


@njit(inline="always")
def log_f32(x):
    """log of docs/arithmetic.md section 3.2 on one float32."""
    finite_pos = (x > ZERO) & (x < POS_INF)
    xc = x if finite_pos else ONE  # special lanes are replaced at the end
    sub = xc < MIN_NORMAL
    xs = xc * TWO23 if sub else xc  # exact rescale of a subnormal
    bits = bits_from_f32(xs)
    e = ((bits >> 23) & 0xFF) - 127 - (23 if sub else 0)
    m = f32_from_bits((bits & 0x7FFFFF) | 0x3F800000)  # m in [1, 2)
    big = m > SQRT2
    m = m * HALF if big else m
    e = e + 1 if big else e
    f = m - ONE  # exact
    s = f / (TWO + f)
    z = s * s
    q = L11
    q = q * z + L9
    q = q * z + L7
    q = q * z + L5
    q = q * z + L3
    q = q * z
    u = s + s
    lm = u + u * q
    ef = np.float32(e)  # |e| <= 149: exact
    y = ef * LN2_HI + (ef * LN2_LO + lm)
    y = POS_INF if x == POS_INF else y
    y = NEG_INF if x == ZERO else y  # either sign of zero
    return NAN if (x != x) | (x < ZERO) else y


@njit(inline="always")
def max2_f32(a, b):
    """max2 of section 2.2: NaN if either is NaN; b if b > a; a otherwise."""
    return b if (b > a) | (b != b) else a


@njit(inline="always")
def next_pow2(n):
    """P2(n): the smallest power of two >= n (P2(0) = P2(1) = 1)."""
    p = 1
    while p < n:
        p <<= 1
    return p


@njit(inline="always")
def tree_sum(s, p):
    """psum's halving tree over s[0:p] in place; return s[0].

    Preconditions: p is a power of two >= 1 and s[n:p] holds -0.0 padding.
    """
    w = p >> 1
    while w >= 1:
        for i in range(w):  # pairs (i, i + w): two contiguous halves, one vector add
            s[i] = s[i] + s[i + w]
        w >>= 1
    return s[0]


@njit(inline="always")
def tree_max(s, p):
    """pmax's halving tree over s[0:p] in place; return s[0].

    Preconditions: p is a power of two >= 1 and s[n:p] holds -inf padding.
    """
    w = p >> 1
    while w >= 1:
        for i in range(w):
            a = s[i]
            b = s[i + w]
            s[i] = b if (b > a) | (b != b) else a
        w >>= 1
    return s[0]


@njit(inline="always")
def psum_row(x, s):
    """psum of the 1-d array x, using the scratch s (len(s) >= P2(len(x)))."""
    n = x.shape[0]
    if n == 0:
        return ZERO
    p = next_pow2(n)
    for i in range(n):
        s[i] = x[i]
    for i in range(n, p):
        s[i] = NEG_ZERO
    return tree_sum(s, p)


@njit(inline="always")
def pmax_row(x, s):
    """pmax of the 1-d array x (len >= 1), using the scratch s (len(s) >= P2(len(x)))."""
    n = x.shape[0]
    p = next_pow2(n)
    for i in range(n):
        s[i] = x[i]
    for i in range(n, p):
        s[i] = NEG_INF
    return tree_max(s, p)
