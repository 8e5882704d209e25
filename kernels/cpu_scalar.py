"""Scalar building blocks of the `cpu` backend: bit casts, exp, log, max2, trees.

Every function here is a numba function inlined into the kernels of
kernels/cpu_*.py, so LLVM sees whole loops and vectorises them across
independent outputs. Each follows docs/arithmetic.md operation for operation:
float32 only (constants are numpy.float32 globals, which numba freezes as
float32; a bare Python float literal would promote the expression to float64),
no fastmath, branches written as selects so loops stay vectorisable.

Caching: numba's on-disk cache of a kernel is keyed on the kernel's own
source file only, so a kernel that inlines a helper from here would keep
stale machine code after this file changed. `drop_stale_cache` (run on
import) therefore fingerprints every kernels/cpu*.py and deletes the cached
cpu kernels when the fingerprint differs from the one they were built with.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from kernels import constants as K
from kernels.cpu_rowtree import row_max_pow2, row_sum_pow2


def drop_stale_cache(here: Path | None = None) -> None:
    """Delete numba's cached cpu kernels unless they were built from today's cpu*.py sources.

    `here` is the folder of the sources (default: this module's). Best effort:
    an unwritable cache folder is left as it is (numba then caches elsewhere
    or not at all, and compiles from source).
    """
    here = here or Path(__file__).resolve().parent
    digest = hashlib.sha256(numba.__version__.encode())
    for source in sorted(here.glob("cpu*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    cache = here / "__pycache__"
    stamp = cache / "cpu_kernels.sources"
    try:
        if stamp.read_text() == digest.hexdigest():
            return
    except OSError:
        pass  # no stamp yet: treat every cached kernel as stale
    try:
        for old in cache.glob("cpu_*.nb[ic]"):
            old.unlink(missing_ok=True)
        cache.mkdir(exist_ok=True)
        tmp = cache / f"cpu_kernels.sources.{os.getpid()}"
        tmp.write_text(digest.hexdigest())
        tmp.replace(stamp)  # atomic: a concurrent import sees the old or the new stamp
    except OSError:
        return


drop_stale_cache()

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


@intrinsic
def mac_f32(typingctx, acc, a, b, fused):
    """One step of a dot product's fold on float32: version 1 `acc + (a * b)`, two roundings (an fmul
    and an fadd, no fast-math flags); version 2 `fma(a, b, acc)`, one rounding (`llvm.fma`, never
    `llvm.fmuladd`). `fused` must be a literal True or False: the choice is made when compiling."""
    if not (acc == a == b == types.float32 and isinstance(fused, types.BooleanLiteral)):
        return None
    one_rounding = fused.literal_value

    def codegen(context, builder, signature, args):
        x, y, z, _ = args
        if one_rounding:
            return builder.fma(y, z, x)
        return builder.fadd(x, builder.fmul(y, z))

    return types.float32(acc, a, b, fused), codegen


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
    q = C7
    q = q * r + C6
    q = q * r + C5
    q = q * r + C4
    q = q * r + C3
    q = q * r + C2
    p = ONE + (r + (r * r) * q)  # the amended v1 tail: monotone in r, unlike Horner through 1.0
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


LITERAL_LEVELS = 1024  # levels w < 1024 run as loops with literal trip counts


@njit(inline="always")
def tree_sum(s, p):
    """psum's halving tree over s[0:p] in place; return s[0].

    Preconditions: p is a power of two >= 1 and s[n:p] holds -0.0 padding.
    Levels w >= LITERAL_LEVELS are loops over two contiguous halves (one
    vector add per 16 pairs); the levels below are written out with literal
    trip counts, so LLVM emits straight vector code with no loop set-up or
    overlap check per level. Same pairs (i, i + w), same order.
    """
    w = p >> 1
    while w >= LITERAL_LEVELS:
        lo = s[:w]
        hi = s[w : 2 * w]
        for i in range(w):
            lo[i] = lo[i] + hi[i]
        w >>= 1
    if p >= 1024:
        for i in range(512):
            s[i] = s[i] + s[i + 512]
    if p >= 512:
        for i in range(256):
            s[i] = s[i] + s[i + 256]
    if p >= 256:
        for i in range(128):
            s[i] = s[i] + s[i + 128]
    if p >= 128:
        for i in range(64):
            s[i] = s[i] + s[i + 64]
    if p >= 64:
        for i in range(32):
            s[i] = s[i] + s[i + 32]
    if p >= 32:
        for i in range(16):
            s[i] = s[i] + s[i + 16]
    if p >= 16:
        for i in range(8):
            s[i] = s[i] + s[i + 8]
    if p >= 8:
        for i in range(4):
            s[i] = s[i] + s[i + 4]
    if p >= 4:
        for i in range(2):
            s[i] = s[i] + s[i + 2]
    if p >= 2:
        s[0] = s[0] + s[1]
    return s[0]


@njit(inline="always")
def tree_max(s, p):
    """pmax's halving tree over s[0:p] in place; return s[0].

    Preconditions: p is a power of two >= 1 and s[n:p] holds -inf padding.
    Written like tree_sum.
    """
    w = p >> 1
    while w >= LITERAL_LEVELS:
        lo = s[:w]
        hi = s[w : 2 * w]
        for i in range(w):
            lo[i] = max2_f32(lo[i], hi[i])
        w >>= 1
    if p >= 1024:
        for i in range(512):
            s[i] = max2_f32(s[i], s[i + 512])
    if p >= 512:
        for i in range(256):
            s[i] = max2_f32(s[i], s[i + 256])
    if p >= 256:
        for i in range(128):
            s[i] = max2_f32(s[i], s[i + 128])
    if p >= 128:
        for i in range(64):
            s[i] = max2_f32(s[i], s[i + 64])
    if p >= 64:
        for i in range(32):
            s[i] = max2_f32(s[i], s[i + 32])
    if p >= 32:
        for i in range(16):
            s[i] = max2_f32(s[i], s[i + 16])
    if p >= 16:
        for i in range(8):
            s[i] = max2_f32(s[i], s[i + 8])
    if p >= 8:
        for i in range(4):
            s[i] = max2_f32(s[i], s[i + 4])
    if p >= 4:
        for i in range(2):
            s[i] = max2_f32(s[i], s[i + 2])
    if p >= 2:
        s[0] = max2_f32(s[0], s[1])
    return s[0]


@njit(inline="always")
def psum_row(x, s):
    """psum of the 1-d array x, using the scratch s (len(s) >= P2(len(x)) / 2).

    The first level (pairs i, i + P/2) reads x directly: a partner at or past
    n is -0.0 padding and x + (-0.0) == x, so those entries are copied.
    """
    n = x.shape[0]
    if n <= 1:
        return x[0] if n == 1 else ZERO
    h = next_pow2(n) >> 1  # h < n <= 2h
    lo = x[: n - h]
    hi = x[h:n]
    for i in range(n - h):
        s[i] = lo[i] + hi[i]
    rest = x[n - h : h]
    dst = s[n - h : h]
    for i in range(2 * h - n):
        dst[i] = rest[i]
    return tree_sum(s, h)


@njit(inline="always")
def pmax_row(x, s):
    """pmax of the 1-d array x (len >= 1), using the scratch s (len(s) >= P2(len(x)) / 2).

    First level fused as in psum_row: max2(x, -inf) == x for every x, NaN included.
    """
    n = x.shape[0]
    if n == 1:
        return x[0]
    h = next_pow2(n) >> 1  # h < n <= 2h
    lo = x[: n - h]
    hi = x[h:n]
    for i in range(n - h):
        s[i] = max2_f32(lo[i], hi[i])
    rest = x[n - h : h]
    dst = s[n - h : h]
    for i in range(2 * h - n):
        dst[i] = rest[i]
    return tree_max(s, h)


@njit(inline="always")
def psum_fast(row, s):
    """psum of a contiguous row: in registers (kernels/cpu_rowtree.py) when its
    length is a power of two in [16, 1024], else psum_row with the scratch s."""
    n = row.shape[0]
    if n == 16:
        return row_sum_pow2(row, 16)
    if n == 32:
        return row_sum_pow2(row, 32)
    if n == 64:
        return row_sum_pow2(row, 64)
    if n == 128:
        return row_sum_pow2(row, 128)
    if n == 256:
        return row_sum_pow2(row, 256)
    if n == 512:
        return row_sum_pow2(row, 512)
    if n == 1024:
        return row_sum_pow2(row, 1024)
    return psum_row(row, s)


@njit(inline="always")
def pmax_fast(row, s):
    """pmax of a contiguous row (len >= 1), as psum_fast."""
    n = row.shape[0]
    if n == 16:
        return row_max_pow2(row, 16)
    if n == 32:
        return row_max_pow2(row, 32)
    if n == 64:
        return row_max_pow2(row, 64)
    if n == 128:
        return row_max_pow2(row, 128)
    if n == 256:
        return row_max_pow2(row, 256)
    if n == 512:
        return row_max_pow2(row, 512)
    if n == 1024:
        return row_max_pow2(row, 1024)
    return pmax_row(row, s)
