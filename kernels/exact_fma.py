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
