"""kernels/lab_math.py equals a literal, one-scalar-at-a-time reading of docs/arithmetic.md sections 8.3 and 8.8.

Each function below transcribes the document's pseudocode with numpy.float32 scalars, the constants
taken from the document's bit patterns, so the vectorised code cannot drift from the page a
re-implementer reads.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kernels import lab_math, reference

F = np.float32


def bits(b: int) -> np.float32:
    return np.array([b], dtype=np.uint32).view(np.float32)[0]


S = [bits(b) for b in (0xB2D7322B, 0x3638EF1D, 0xB9500D01, 0x3C088889, 0xBE2AAAAB)]  # S11 .. S3
C = [bits(b) for b in (0x310F76C7, 0xB493F27E, 0x37D00D01, 0xBAB60B61, 0x3D2AAAAB)]  # C12 .. C4
P = [bits(b) for b in (0x3FC90000, 0x39FD0000, 0x35AA0000, 0x30885A31)]
T = [bits(b) for b in (0x3B1677B9, 0xBC08C248, 0x3CB25704, 0xBD5D048C, 0x3E088875, 0xBEAAAAAB)]  # T5 .. T0
TWO_OVER_PI, SHIFTER = bits(0x3F22F983), bits(0x4B400000)


def exp1(x: np.float32) -> np.float32:
    return reference.exp(np.array([x], dtype=F))[0]


def trig(x: np.float32, cosine: bool) -> np.float32:
    if not abs(x) <= F(65536.0):
        return F(np.nan)
    t = x * TWO_OVER_PI
    n = (t + SHIFTER) - SHIFTER
    r = (((x - n * P[0]) - n * P[1]) - n * P[2]) - n * P[3]
    z = r * r
    q = S[0]
    for c in S[1:]:
        q = q * z + c
    sin_r = r + (r * z) * q
    p = C[0]
    for c in C[1:]:
        p = p * z + c
    cos_r = F(1.0) - (z * F(0.5) - (z * z) * p)
    k = (int(n) + (1 if cosine else 0)) % 4
    y = sin_r if k in (0, 2) else cos_r
    return -y if k >= 2 else y


def tanh1(x: np.float32) -> np.float32:
    if math.isnan(x):
        return x
    a = abs(x)
    z = a * a
    if a < F(0.625):
        q = T[0]
        for c in T[1:]:
            q = q * z + c
        y = a + (a * z) * q
    else:
        y = F(1.0) - F(2.0) / (exp1(a * F(2.0)) + F(1.0))
    return np.copysign(y, x)


def inputs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    special = np.array([0.0, -0.0, 0.625, -0.625, 0.62499994, 0.7853982, 1.5707964, 3.1415927, 65536.0], dtype=F)
    return np.concatenate([special, rng.uniform(-4, 4, 300).astype(F), rng.uniform(-70000, 70000, 100).astype(F)])


@pytest.mark.parametrize(("name", "vectorised", "scalar"), [
    ("sin", lab_math.sin, lambda x: trig(x, False)),
    ("cos", lab_math.cos, lambda x: trig(x, True)),
    ("tanh", lab_math.tanh, tanh1),
])  # fmt: skip
def test_the_code_is_the_document(name, vectorised, scalar):
    x = inputs(7)
    got = vectorised(x)
    with np.errstate(all="ignore"):
        want = np.array([scalar(v) for v in x], dtype=F)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), f"{name} differs at {x[~same][:5]}: {got[~same][:5]} vs {want[~same][:5]}"
