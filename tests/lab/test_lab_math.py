"""Op table 1's new elementwise functions (kernels/lab_math.py) against float64, with their special values.

The bounds are the measured worst cases over these inputs, rounded up a little (docs/arithmetic.md
section 8): an implementation that changed a constant or an operation order would leave them.
"""

from __future__ import annotations

import numpy as np
import pytest

from kernels import KernelInputError
from kernels import lab_math as L


def ulps(y: np.ndarray, ref: np.ndarray) -> float:
    """Worst error of float32 `y` against float64 `ref`, in units of the float32 spacing at `ref`."""
    spacing = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    return float(np.max(np.abs(y.astype(np.float64) - ref) / spacing))


def uniform(lo: float, hi: float, seed: int, n: int = 400_000) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, n).astype(np.float32)


@pytest.mark.parametrize(("fn", "ref"), [(L.sin, np.sin), (L.cos, np.cos)])
def test_sin_cos_accuracy(fn, ref):
    small = np.linspace(-0.785, 0.785, 400_001).astype(np.float32)
    assert ulps(fn(small), ref(small.astype(np.float64))) <= 1.0  # the polynomials alone
    wide = np.concatenate([uniform(-200, 200, 1), uniform(-65536, 65536, 2)])
    assert np.max(np.abs(fn(wide).astype(np.float64) - ref(wide.astype(np.float64)))) <= 1.2e-7  # with reduction


def test_sin_cos_outside_the_domain_are_nan():
    x = np.array([np.nan, np.inf, -np.inf, 65536.5, -70000.0, 65536.0], dtype=np.float32)
    for fn in (L.sin, L.cos):
        y = fn(x)
        assert np.isnan(y[:5]).all() and np.isfinite(y[5])


def test_sin_cos_quadrants():
    # exact points: sin(0) = 0, cos(0) = 1, and the signs in each quadrant
    assert L.sin(np.zeros(1, np.float32))[0] == 0.0 and L.cos(np.zeros(1, np.float32))[0] == 1.0
    x = np.array([1.0, 2.5, 4.0, 5.5, -1.0, -2.5, -4.0, -5.5], dtype=np.float32)
    assert np.array_equal(np.sign(L.sin(x)), np.sign(np.sin(x.astype(np.float64))))
    assert np.array_equal(np.sign(L.cos(x)), np.sign(np.cos(x.astype(np.float64))))


def test_reciprocal_rsqrt_sigmoid_pow_accuracy():
    x = uniform(1e-6, 1e6, 3)
    assert ulps(L.reciprocal(x), 1 / x.astype(np.float64)) <= 0.5  # one rounding: correctly rounded
    assert ulps(L.rsqrt(x), 1 / np.sqrt(x.astype(np.float64))) <= 1.5  # two roundings
    s = uniform(-30, 30, 4)
    assert ulps(L.sigmoid(s), 1 / (1 + np.exp(-s.astype(np.float64)))) <= 2.5
    e = uniform(-1, 1, 5)
    assert ulps(L.pow_scalar_base(np.float32(2.0), e), 2.0 ** e.astype(np.float64)) <= 1.2
    e = uniform(0, 1, 6)  # RoPE's 10000 ** (2i / D): the rounding of x * log(b) grows with |x log b|
    assert ulps(L.pow_scalar_base(np.float32(10000.0), e), 10000.0 ** e.astype(np.float64)) <= 11


def test_pow_needs_a_positive_base():
    with pytest.raises(KernelInputError, match="finite base > 0"):
        L.pow_scalar_base(np.float32(-2.0), np.ones(2, np.float32))


def test_bad_input_is_refused():
    with pytest.raises(KernelInputError, match="dtype float64"):
        L.sin(np.ones(2))


def test_tanh_accuracy_and_special_values():
    x = np.linspace(-12, 12, 400_001).astype(np.float32)
    assert ulps(L.tanh(x), np.tanh(x.astype(np.float64))) <= 1.3
    small = np.linspace(-0.62, 0.62, 400_001).astype(np.float32)  # the fitted polynomial alone
    assert ulps(L.tanh(small), np.tanh(small.astype(np.float64))) <= 0.85
    y = L.tanh(np.array([np.nan, -0.0, np.inf, -np.inf, 100.0], dtype=np.float32))
    assert np.isnan(y[0]) and np.signbit(y[1]) and y[1] == 0 and list(y[2:]) == [1.0, -1.0, 1.0]


def test_gelu_tanh_against_its_float64_formula():
    x = np.linspace(-12, 12, 400_001).astype(np.float32)
    x64 = x.astype(np.float64)
    inner = np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)
    want = 0.5 * x64 * (1 + np.tanh(inner))
    assert np.max(np.abs(L.gelu_tanh(x) - want)) <= 5e-7
    dwant = 0.5 * (1 + np.tanh(inner)) + 0.5 * x64 * (1 - np.tanh(inner) ** 2) * np.sqrt(2 / np.pi) * (
        1 + 3 * 0.044715 * x64**2
    )
    dy = np.full_like(x, 1.0)
    assert np.max(np.abs(L.gelu_tanh_backward(x, dy) - dwant)) <= 2e-6


def test_each_backend_names_its_module_of_these_functions():
    from kernels import cpu_lab_math

    assert L.for_backend("reference") is L and L.for_backend("cpu") is cpu_lab_math
    with pytest.raises(KernelInputError, match="unknown backend 'xpu', want one of reference, cpu, triton"):
        L.for_backend("xpu")
