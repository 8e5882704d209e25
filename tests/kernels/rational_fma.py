"""fusedMultiplyAdd on float32 by exact rational arithmetic: the oracle kernels/exact_fma.py is held to.

Independent of floating point: every finite float32 is an integer times a power
of two (`float.as_integer_ratio`), so a * b + c is an exact integer over 2^k, and
rounding it to float32 is integer work: keep the bits down to the quantum of the
result's binade (2^-149 at the bottom: subnormals), round the rest to nearest,
ties to even, overflow to infinity at 2^128. Special values follow IEEE 754-2008
section 6 (NaN if any input is NaN, or inf * 0, or inf - inf; the sign of an exact
zero sum is + unless both terms are -0).
"""

from __future__ import annotations

import math

import numpy as np

F32 = np.float32
EMIN_QUANTUM = -149  # exponent of the smallest subnormal's quantum
EMAX = 128  # 2^128 is the first power of two beyond float32


def _dyadic(x: float) -> tuple[int, int]:
    """x = n / 2^k exactly, k >= 0 (x finite)."""
    n, d = x.as_integer_ratio()
    return n, d.bit_length() - 1


def round_dyadic(n: int, k: int, negative_zero: bool = False) -> np.float32:
    """n / 2^k rounded to the nearest float32, ties to even; a zero gets the sign negative_zero names."""
    if n == 0:
        return F32(-0.0) if negative_zero else F32(0.0)
    sign = -1 if n < 0 else 1
    m = abs(n)
    top = m.bit_length() - 1 - k  # exponent of the leading bit
    quantum = max(top - 23, EMIN_QUANTUM)
    drop = quantum + k  # low bits of m below the quantum
    if drop <= 0:
        q = m << -drop
    else:
        q, rem = m >> drop, m & ((1 << drop) - 1)
        half = 1 << (drop - 1)
        if rem > half or (rem == half and q & 1):
            q += 1
    if q == 0:
        return F32(-0.0) if sign < 0 else F32(0.0)
    if q.bit_length() + quantum > EMAX:
        return F32(sign * math.inf)
    return F32(sign * math.ldexp(q, quantum))  # exact: q < 2^25 and the value is a float32


def fma_exact(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    """IEEE 754-2008 fusedMultiplyAdd(a, b, c) in binary32, round to nearest even."""
    fa, fb, fc = float(a), float(b), float(c)
    if math.isnan(fa) or math.isnan(fb) or math.isnan(fc):
        return F32(math.nan)
    if math.isinf(fa) or math.isinf(fb):
        if fa == 0 or fb == 0:
            return F32(math.nan)
        p_sign = math.copysign(1.0, fa) * math.copysign(1.0, fb)
        if math.isinf(fc) and math.copysign(1.0, fc) != p_sign:
            return F32(math.nan)
        return F32(p_sign * math.inf)
    if math.isinf(fc):
        return F32(fc)
    na, ka = _dyadic(fa)
    nb, kb = _dyadic(fb)
    nc, kc = _dyadic(fc)
    np_, kp = na * nb, ka + kb
    k = max(kp, kc)
    total = (np_ << (k - kp)) + (nc << (k - kc))
    product_negative_zero = np_ == 0 and (math.copysign(1.0, fa) * math.copysign(1.0, fb) < 0)
    both_negative_zero = product_negative_zero and fc == 0 and math.copysign(1.0, fc) < 0
    return round_dyadic(total, k, negative_zero=both_negative_zero)


def same_bits(x: np.float32, y: np.float32) -> bool:
    """Equal bit patterns, every NaN equal to every NaN (docs/arithmetic.md, section 1)."""
    if np.isnan(x) and np.isnan(y):
        return True
    return bool(np.asarray(x, F32).view(np.uint32) == np.asarray(y, F32).view(np.uint32))
