"""A correctly rounded float32 fused multiply-add in numpy, with no hardware FMA (arithmetic version 2).

`fma(a, b, c)` is `a * b + c` computed exactly and rounded once to the nearest
float32, ties to even: the operation IEEE 754-2008 calls fusedMultiplyAdd, which
x86 (FMA3), ARMv8 and every GPU execute in one instruction. Here it is built from
float64 operations, each of which numpy rounds correctly:

1. p = f64(a) * f64(b) is exact: two 24-bit significands make at most 48 bits,
   and |p| lies between 2^-298 and 2^256, inside float64's normal range.
2. s = p + f64(c) is rounded *to odd* in float64: the rounded-to-nearest sum, its
   exact error by TwoSum (exact for any two finite float64 values that do not
   overflow, and these cannot), and, when the sum was inexact and the nearest
   value has an even last bit, the neighbour on the side of the error instead.
3. float32(s), rounded to nearest even. Rounding to odd at 53 bits and then to
   nearest at 24 bits gives the correctly rounded result, because 53 >= 24 + 2
   (Boldo and Melquiond, "Emulation of FMA and correctly rounded sums: proved
   algorithms using rounding to odd", IEEE TC 2008); the final cast also gives
   float32 subnormals, overflow to infinity and signed zeros as IEEE defines them.

Infinities and NaNs take float64's own result in step 2 (inf * 0 and inf - inf
are NaN), which is what fusedMultiplyAdd returns. Which NaN is not specified
(docs/arithmetic.md, section 1). tests/kernels/test_exact_fma.py holds this
against exact rational arithmetic on random and adversarial inputs.

Precondition: the process runs with IEEE round-to-nearest and no flush-to-zero
(numpy's default; nothing in p2paudit changes it).
"""

from __future__ import annotations

import numpy as np

from kernels.backend_contract import HostArray

F32 = np.float32
F64 = np.float64


def fma(a: HostArray | np.floating, b: HostArray | np.floating, c: HostArray | np.floating) -> HostArray:
    """a * b + c rounded once to float32 (nearest, ties to even), broadcast like numpy; float32 in, float32 out."""
    with np.errstate(all="ignore"):  # inf - inf, inf * 0: NaN is fusedMultiplyAdd's answer too
        p = np.asarray(a, dtype=F32).astype(F64) * np.asarray(b, dtype=F32).astype(F64)  # exact
        c64 = np.asarray(c, dtype=F32).astype(F64)
        s = p + c64  # nearest
        back = s - p  # TwoSum (Knuth): s + err == p + c64 exactly
        err = (p - (s - back)) + (c64 - back)
        inexact = (err != 0) & np.isfinite(s)
        even = (s.view(np.int64) & 1) == 0
        toward = np.where(err > 0, np.inf, -np.inf)
        odd = np.where(inexact & even, np.nextafter(s, toward), s)  # s rounded to odd
        return np.asarray(odd.astype(F32))


# Bits of a binary64 value, for fused_fold's test of where one rounding to nearest may not be fma's.
_LOW29 = np.uint64((1 << 29) - 1)  # the significand bits binary32 drops from binary64
_HALF29 = np.uint64(1 << 28)  # ... exactly half of binary32's last place: a binary32 midpoint
_MAGNITUDE = np.uint64((1 << 63) - 1)
_ONE = np.uint64(1)
_BELOW_NORMAL = np.float64(2.0**-126).view(np.uint64) - _ONE  # |s| - 1 below this: 0 < |s| < 2^-126


def fused_fold(at: HostArray, b: HostArray) -> HostArray:
    """out[.., m, n] = fold of acc = fma(at[.., i, m], b[.., i, n], acc), i = 0..K-1, from +0.0: float32.

    Preconditions: at (.., K, M) and b (.., K, N) are float32 with the same leading dimensions (the
    caller has validated them; `at` is the first matrix with its k axis before its m axis).

    Each step forms s = a * b + acc in binary64 (the product exact, the sum rounded to nearest) and
    rounds s to float32. That is the correctly rounded result unless s is a binary32 midpoint: rounding
    to nearest cannot carry a value across a midpoint (every binary32 midpoint is a binary64 number), so
    only a sum that lands exactly on one may have come from either side. Those entries, and every sum
    below 2^-126 (where binary32's spacing is another), take fma's exact path; they are rare.

    The test for sums below 2^-126 is skipped when none can be inexact: if every nonzero |a| * |b| is
    at least 2^-130, each product is a multiple of 2^-178 (a float32's last place exceeds 2^-24 of it),
    and so is every sum (the accumulator is a multiple of 2^-149); a sum below 2^-126 is then fewer than
    2^52 such multiples, exact in binary64, and rounds once.
    """
    *lead, k, m = at.shape
    shape = (*lead, m, b.shape[-1])
    acc = np.zeros(shape, F32)  # the accumulators, rounded to float32 after every step
    if k == 0 or acc.size == 0:
        return acc
    with np.errstate(invalid="ignore"):  # a signalling NaN is quietened: NaN either way (which NaN is open)
        a64 = np.moveaxis(at, -2, 0).astype(F64)[..., :, None]  # (K, .., M, 1), exact
        b64 = np.moveaxis(b, -2, 0).astype(F64)[..., None, :]  # (K, .., 1, N), exact
    check_tiny = _smallest_product(at, b) < 2.0**-130
    s = np.empty(shape, F64)
    bits, scratch = s.view(np.uint64), np.empty(shape, np.uint64)
    hard, tiny = np.empty(shape, bool), np.empty(shape, bool)
    with np.errstate(all="ignore"):  # overflow, inf - inf and inf * 0 are part of the spec
        for i in range(k):
            np.multiply(a64[i], b64[i], out=s)  # exact
            np.add(s, acc, out=s)  # rounded to nearest in binary64
            np.equal(np.bitwise_and(bits, _LOW29, out=scratch), _HALF29, out=hard)
            if check_tiny:
                np.bitwise_and(bits, _MAGNITUDE, out=scratch)
                np.less(np.subtract(scratch, _ONE, out=scratch), _BELOW_NORMAL, out=tiny)
                np.logical_or(hard, tiny, out=hard)
            fix = None
            if hard.any():  # fma itself, from the accumulator before this step
                where = np.nonzero(hard)
                a_i, b_i = np.broadcast_to(a64[i], shape)[where], np.broadcast_to(b64[i], shape)[where]
                fix = fma(a_i.astype(F32), b_i.astype(F32), acc[where])
            np.copyto(acc, s, casting="unsafe")  # rounded to nearest float32
            if fix is not None:
                acc[where] = fix
    return acc


def _smallest_product(a: HostArray, b: HostArray) -> float:
    """The smallest nonzero |x| times the smallest nonzero |y| over x in a, y in b (+inf if either is all zeros)."""
    least = []
    for m in (a, b):
        mag = np.abs(m)  # exact; NaN stays NaN and is left out below
        least.append(float(np.min(mag, where=mag > 0, initial=np.inf)))
    return least[0] * least[1]
