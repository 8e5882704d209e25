"""Canonical elementwise functions that op table 1 needs beyond the contract's (docs/arithmetic.md, section 8).

sin, cos (a four-part Cody-Waite reduction by pi/2 and Taylor polynomials on
[-pi/4, pi/4]), tanh (a fitted odd polynomial below 0.625, 1 - 2/(exp(2a) + 1)
above), GELU's tanh form and its derivative, rsqrt, reciprocal, sigmoid and pow with a scalar base, all
built from the rounded primitives of section 1 and the `exp`/`log` of
section 3. Every function takes a float32 numpy array of any shape and
returns a new float32 array of that shape; each is a chain of numpy float32
ufuncs (one rounding each, never contracted), so the same code is the
reference backend's code and the definition. The cpu backend's are
kernels/cpu_lab_math.py (the same operations compiled: tests/lab/test_cpu_lab_math.py), the triton backend's
kernels/triton_lab.py (Triton kernels of the same operations in the
same order), held bitwise to these by tests/lab/test_lab_triton.py;
`for_backend` names the module for a backend. Bad input raises KernelInputError.
"""

from __future__ import annotations

import importlib
import types

import numpy as np

from kernels import KernelInputError, reference, validate
from kernels import constants as K
from kernels.constants import float32_from_bits

F32 = np.float32

# sin / cos: n = round(x * 2/pi); r = x - n * pi/2 with pi/2 split in four float32 parts. P1, P2 and P3 have
# 8 significant bits each, so n * P_i is exact for |n| < 2^16; P4 is the float32 nearest the remainder.
TWO_OVER_PI = float32_from_bits(0x3F22F983)  # 0.636619746685028076171875
PIO2_1 = float32_from_bits(0x3FC90000)  # 1.5703125
PIO2_2 = float32_from_bits(0x39FD0000)  # 0.0004825592041015625
PIO2_3 = float32_from_bits(0x35AA0000)  # 1.2665987014770508e-06
PIO2_4 = float32_from_bits(0x30885A31)  # 9.92093629470503e-10
TRIG_LIMIT = F32(65536.0)  # |x| above it (and inf, NaN): NaN
SIN_C = (  # float32((-1)^((k-1)/2) / k!) for k = 11, 9, 7, 5, 3: Horner order
    float32_from_bits(0xB2D7322B),
    float32_from_bits(0x3638EF1D),
    float32_from_bits(0xB9500D01),
    float32_from_bits(0x3C088889),
    float32_from_bits(0xBE2AAAAB),
)
COS_C = (  # float32((-1)^(k/2) / k!) for k = 12, 10, 8, 6, 4: Horner order
    float32_from_bits(0x310F76C7),
    float32_from_bits(0xB493F27E),
    float32_from_bits(0x37D00D01),
    float32_from_bits(0xBAB60B61),
    float32_from_bits(0x3D2AAAAB),
)


def _horner(z: np.ndarray, coefficients: tuple[np.float32, ...]) -> np.ndarray:
    """c0 then q = q * z + c_i for the rest: two roundings per step, never fused."""
    q = np.full(z.shape, coefficients[0], dtype=F32)
    for c in coefficients[1:]:
        q = q * z + c
    return q


def _reduce_pio2(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(r, quadrant n mod 4 as int32, lanes outside the domain) with r ~ x - n pi/2, |r| <~ pi/4."""
    bad = ~(np.abs(x) <= TRIG_LIMIT)  # NaN compares false: bad too
    xc = np.where(bad, K.ZERO, x)
    t = xc * TWO_OVER_PI
    n = (t + K.SHIFTER) - K.SHIFTER  # nearest integer, ties to even (|t| < 2^22)
    r = (((xc - n * PIO2_1) - n * PIO2_2) - n * PIO2_3) - n * PIO2_4  # the first difference is exact
    return r, n.astype(np.int32) & np.int32(3), bad


def _sin_poly(r: np.ndarray) -> np.ndarray:
    """r + (r z) q(z), z = r r: sin on the reduced range."""
    z = r * r
    y: np.ndarray = r + (r * z) * _horner(z, SIN_C)
    return y


def _cos_poly(r: np.ndarray) -> np.ndarray:
    """1 - (z/2 - z^2 q(z)), z = r r: cos on the reduced range (z/2 is exact)."""
    z = r * r
    y: np.ndarray = K.ONE - (z * K.HALF - (z * z) * _horner(z, COS_C))
    return y


def _trig(x: np.ndarray, shift: int) -> np.ndarray:
    """sin(x) (shift 0) or cos(x) = sin(x + pi/2) (shift 1) by quadrant."""
    validate.check_elementwise(x)
    with np.errstate(all="ignore"):
        r, quadrant, bad = _reduce_pio2(x)
        q = (quadrant + np.int32(shift)) & np.int32(3)
        s, c = _sin_poly(r), _cos_poly(r)
        y = np.where((q & np.int32(1)) == 0, s, c)
        y = np.where(q >= 2, -y, y)
        return np.asarray(np.where(bad, F32(np.nan), y), dtype=F32)


def sin(x: np.ndarray) -> np.ndarray:
    """sin(x), |x| <= 65536 (NaN outside, and for inf and NaN); any shape."""
    return _trig(x, 0)


def cos(x: np.ndarray) -> np.ndarray:
    """cos(x), |x| <= 65536 (NaN outside, and for inf and NaN); any shape."""
    return _trig(x, 1)


# tanh: below TANH_SPLIT, a + (a z) q(z) with q fitted by least squares at Chebyshev nodes of z = a^2 in
# [0, 0.625^2] (float64, then rounded to float32: the bits below); above, 1 - 2 / (exp(2a) + 1).
TANH_SPLIT = F32(0.625)
TANH_C = (  # q's coefficients from z^5 down to z^0: Horner order
    float32_from_bits(0x3B1677B9),
    float32_from_bits(0xBC08C248),
    float32_from_bits(0x3CB25704),
    float32_from_bits(0xBD5D048C),
    float32_from_bits(0x3E088875),
    float32_from_bits(0xBEAAAAAB),
)
GELU_K0 = F32(0.7978845608028654)  # float32(sqrt(2 / pi)), 0x3F4C422A
GELU_K1 = F32(0.044715)  # 0x3D372713
GELU_K3 = F32(0.134145)  # float32(3 * 0.044715), 0x3E095D4F


def _tanh(x: np.ndarray) -> np.ndarray:
    """tanh on a float32 array, unchecked: the sign of x on tanh(|x|) (copysign is exact)."""
    a = np.abs(x)
    z = a * a
    small = a + (a * z) * _horner(z, TANH_C)
    big = K.ONE - K.TWO / (reference.exp(np.asarray(a * K.TWO, dtype=F32)) + K.ONE)  # 0-d stays 0-d
    y: np.ndarray = np.copysign(np.where(a < TANH_SPLIT, small, big), x)
    return np.where(np.isnan(x), x, y).astype(F32, copy=False)


def tanh(x: np.ndarray) -> np.ndarray:
    """tanh(x), any shape (+-1 beyond |x| ~ 9, NaN for NaN, -0.0 for -0.0)."""
    validate.check_elementwise(x)
    with np.errstate(all="ignore"):
        return _tanh(x)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """(0.5 x) (1 + tanh(K0 (x + K1 ((x x) x)))): GELU's tanh form in this order."""
    validate.check_elementwise(x)
    with np.errstate(all="ignore"):
        t = _tanh(np.asarray(GELU_K0 * (x + GELU_K1 * ((x * x) * x)), dtype=F32))
        return np.asarray((K.HALF * x) * (K.ONE + t), dtype=F32)


def gelu_tanh_backward(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dy (0.5 (1 + t) + ((0.5 x) (1 - t t)) (K0 (1 + K3 x x))), t = tanh of the forward's inner value."""
    validate.check_pair(x, "x", dy, "dy")
    with np.errstate(all="ignore"):
        x2 = x * x
        t = _tanh(np.asarray(GELU_K0 * (x + GELU_K1 * (x2 * x)), dtype=F32))
        left = K.HALF * (K.ONE + t)
        right = ((K.HALF * x) * (K.ONE - t * t)) * (GELU_K0 * (K.ONE + GELU_K3 * x2))
        return np.asarray(dy * (left + right), dtype=F32)


def reciprocal(x: np.ndarray) -> np.ndarray:
    """1 / x, one rounding."""
    validate.check_elementwise(x)
    with np.errstate(all="ignore"):
        return np.asarray(K.ONE / x, dtype=F32)


def rsqrt(x: np.ndarray) -> np.ndarray:
    """1 / sqrt(x): the correctly rounded root, then one division (two roundings)."""
    validate.check_elementwise(x)
    with np.errstate(all="ignore"):
        return np.asarray(K.ONE / np.sqrt(x), dtype=F32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), the same s as silu_backward's (section 3.3)."""
    validate.check_elementwise(x)
    with np.errstate(all="ignore"):
        return np.asarray(K.ONE / (K.ONE + reference.exp(np.asarray(-x, dtype=F32))), dtype=F32)  # 0-d: an array


def pow_scalar_base(base: np.float32, x: np.ndarray) -> np.ndarray:
    """base ** x as exp(x * log(base)) for a float32 base > 0: log once on the host value, then exp per element."""
    validate.check_elementwise(x)
    if not (base > 0 and np.isfinite(base)):
        raise KernelInputError(f"pow with a scalar base needs a finite base > 0, got {float(base)!r}")
    log_base = reference.log(np.array(base, dtype=F32))
    with np.errstate(all="ignore"):
        return reference.exp(np.asarray(x * log_base, dtype=F32))


_MODULES = {"reference": __name__, "cpu": "kernels.cpu_lab_math", "triton": "kernels.triton_lab"}


def for_backend(name: str) -> types.ModuleType:
    """The module with these functions for backend `name`, the same names and bits: this one for reference (numpy),
    kernels.cpu_lab_math for cpu (compiled, on every thread), kernels.triton_lab for triton (Triton kernels;
    importing it needs CUDA or TRITON_INTERPRET=1)."""
    if name not in _MODULES:
        raise KernelInputError(f"unknown backend {name!r}, want one of reference, cpu, triton")
    return importlib.import_module(_MODULES[name])
