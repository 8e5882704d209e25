"""kernels/exact_fma.fma is IEEE fusedMultiplyAdd: held to exact rational arithmetic (tests/kernels/rational_fma.py).

Random bit patterns cover every class of float32 (NaN, infinities, subnormals,
zeros) in proportion to their encodings; the adversarial families aim at what an
emulated FMA gets wrong: exact ties of the product, near-ties pushed off the
midpoint by an addend far below float64's precision (where rounding the float64
sum to nearest and then to float32 rounds twice and fails: the baseline below
shows it does), cancellation down to the product's rounding error, subnormal
and overflowing results, and signed zeros. The slow test runs millions.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import tie_products

from kernels import get_backend
from kernels.exact_fma import fma, fused_fold
from tests.kernels.rational_fma import fma_exact, round_dyadic, same_bits

F32 = np.float32


def _bits(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(F32)


def _mismatches(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> list[tuple[float, float, float]]:
    got = fma(a, b, c)
    return [(float(x), float(y), float(z)) for x, y, z, g in zip(a, b, c, got) if not same_bits(g, fma_exact(x, y, z))][
        :5
    ]


def _scaled(rng: np.random.Generator, n: int, lo: int, hi: int) -> np.ndarray:
    """float32 values with random significands and exponents in [lo, hi), random signs."""
    sig = rng.uniform(1.0, 2.0, n)
    exp = rng.integers(lo, hi, n)
    sign = rng.choice([-1.0, 1.0], n)
    return (sign * np.ldexp(sig, exp)).astype(F32)


def _adversarial(rng: np.random.Generator, n: int) -> list[tuple[str, np.ndarray, np.ndarray, np.ndarray]]:
    ta, tb = tie_products(rng, n)
    tiny = np.array([F32(1e-45), F32(-1e-45), F32(2.0**-100), F32(-(2.0**-100))], F32)
    near = rng.choice(tiny, n)
    a, b = _scaled(rng, n, -30, 30), _scaled(rng, n, -30, 30)
    rounded_product = (a.astype(np.float64) * b.astype(np.float64)).astype(F32)
    sub_a, sub_b = _scaled(rng, n, -80, -60), _scaled(rng, n, -80, -60)
    big_a, big_b = _scaled(rng, n, 60, 70), _scaled(rng, n, 60, 70)
    zeros = np.array([0.0, -0.0], F32)
    return [
        ("exact ties, c = 0", ta, tb, rng.choice(zeros, n)),
        ("ties pushed off the midpoint by a tiny addend", ta, tb, near),
        ("cancellation: c = -round(a*b)", a, b, -rounded_product),
        ("subnormal products and addends", sub_a, sub_b, _scaled(rng, n, -149, -120)),
        ("products near overflow", big_a, big_b, _scaled(rng, n, 120, 128)),
        ("signed zeros", rng.choice(zeros, n), _scaled(rng, n, -10, 10), rng.choice(zeros, n)),
        ("zero times anything", rng.choice(zeros, n), _bits(rng, n), _bits(rng, n)),
    ]


def test_rational_oracle_rounds_as_ieee_does() -> None:
    """The oracle's rounding agrees with the float32 cast on values whose float64 form is exact."""
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.standard_normal(20000), np.ldexp(rng.uniform(1, 2, 2000), rng.integers(-160, 130, 2000))])
    with np.errstate(over="ignore"):  # some of x lie beyond float32: both sides must give infinity
        expected = x.astype(F32)
    for v, want in zip(x, expected):
        n, d = float(v).as_integer_ratio()
        assert same_bits(round_dyadic(n, d.bit_length() - 1), want), v
    assert same_bits(round_dyadic(0, 0, negative_zero=True), F32(-0.0))
    assert np.isinf(round_dyadic(2**128 - 2**103, 0))  # the midpoint above FLT_MAX rounds to infinity
    assert round_dyadic(2**128 - 2**103 - 1, 0) == np.finfo(F32).max


def test_random_bit_patterns() -> None:
    rng = np.random.default_rng(1)
    a, b, c = _bits(rng, 100_000), _bits(rng, 100_000), _bits(rng, 100_000)
    assert _mismatches(a, b, c) == []


def test_random_values_of_overlapping_scale() -> None:
    """Random bit patterns rarely overlap a product with its addend; these always do."""
    rng = np.random.default_rng(2)
    n = 100_000
    a, b = _scaled(rng, n, -20, 20), _scaled(rng, n, -20, 20)
    c = _scaled(rng, n, -40, 40)
    assert _mismatches(a, b, c) == []


@pytest.mark.parametrize("family", range(7))
def test_adversarial_families(family: int) -> None:
    name, a, b, c = _adversarial(np.random.default_rng(3 + family), 20_000)[family]
    assert _mismatches(a, b, c) == [], name


def test_rounding_twice_fails_where_fma_must_not() -> None:
    """The baseline: float32(f64(a) * f64(b) + f64(c)) rounds twice and is wrong on near-ties; fma is right."""
    rng = np.random.default_rng(4)
    a, b = tie_products(rng, 5_000)
    c = rng.choice(np.array([2.0**-100, -(2.0**-100)], F32), 5_000)
    naive = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)
    wrong = sum(not same_bits(x, fma_exact(p, q, r)) for x, p, q, r in zip(naive, a, b, c))
    assert wrong > 2_000  # about half of them: every tie whose even neighbour is on the other side
    assert _mismatches(a, b, c) == []


def test_a_product_in_one_rounding_differs_from_two() -> None:
    """fma(a, b, c) is not (a * b) + c in float32: the case version 1 and version 2 part on."""
    a = b = F32(1 + 2.0**-12)  # a * b = 1 + 2^-11 + 2^-24: a tie, which float32 rounds to 1 + 2^-11
    c = F32(-(1 + 2.0**-11))
    assert fma(a, b, c) == F32(2.0**-24)  # exact
    assert (a * b) + c == F32(0.0)  # the product rounded first


def test_broadcast_and_dtype() -> None:
    out = fma(np.ones((3, 1), F32), np.full((1, 4), 2.0, F32), F32(0.5))
    assert out.dtype == F32 and out.shape == (3, 4) and bool(np.all(out == F32(2.5)))


@pytest.mark.slow
def test_millions_of_inputs() -> None:
    """Two million random and 1.4 million adversarial cases, every one equal to the rational result."""
    rng = np.random.default_rng(5)
    for _ in range(10):
        a, b, c = _bits(rng, 100_000), _bits(rng, 100_000), _bits(rng, 100_000)
        assert _mismatches(a, b, c) == []
        a, b = _scaled(rng, 100_000, -20, 20), _scaled(rng, 100_000, -20, 20)
        assert _mismatches(a, b, _scaled(rng, 100_000, -40, 40)) == []
    for _ in range(10):
        for name, a, b, c in _adversarial(rng, 20_000):
            assert _mismatches(a, b, c) == [], name


@pytest.mark.parametrize("family", range(7))
def test_the_fast_fold_takes_the_exact_path_wherever_it_must(family):
    """fused_fold (the reference's fold) rounds most steps once in binary64 and then to float32, and folds
    again with fma the entries where that may be wrong; on every adversarial family its second step,
    fma(a, b, acc) after acc = fma(1, c, +0.0) (c, but +0.0 for -0.0), is the rational result. Each
    input is a batch of its own (.., K = 2, 1)."""
    name, a, b, c = _adversarial(np.random.default_rng(30 + family), 20_000)[family]
    ones = np.ones_like(a)
    got = fused_fold(np.stack([ones, a], axis=1)[:, :, None], np.stack([c, b], axis=1)[:, :, None])[:, 0, 0]
    one, zero = F32(1.0), F32(0.0)
    bad = [
        (float(x), float(y), float(z))
        for x, y, z, g in zip(a, b, c, got)
        if not same_bits(g, fma_exact(x, y, fma_exact(one, z, zero)))
    ]
    assert bad[:5] == [], name


def test_the_fast_fold_equals_the_plain_fold_of_fma():
    """Batched, with exact ties on the way and ties pushed off the midpoint after the first step."""
    rng = np.random.default_rng(31)
    a, b = _scaled(rng, 2 * 40 * 30, -20, 20).reshape(2, 40, 30), _scaled(rng, 2 * 30 * 50, -20, 20).reshape(2, 30, 50)
    b[1, 3, :7] = tie_products(rng, 7)[1]  # some exact ties on the way
    # Entries (0, 5, n >= 40): acc = +-2^-100 after k = 0, then an exact tie at k = 1, so the binary64 sum
    # is the midpoint itself and the exact sum is not: the fast path's one rounding is wrong there.
    a[0, 5, :2] = 1.0, 1.0 + 2.0**-12
    b[0, 0, 40:] = rng.choice([2.0**-100, -(2.0**-100)], 10)
    b[0, 1, 40:] = (4096 + 2 * rng.integers(0, 2000, 10) + 1) / 4096 * 2.0 ** rng.integers(-5, 5, 10)
    plain = np.zeros((2, 40, 50), F32)
    twice = np.zeros((2, 40, 50), F32)  # the baseline: the binary64 sum rounded to nearest, then to float32
    for k in range(30):
        plain = fma(a[..., :, k : k + 1], b[..., k : k + 1, :], plain)
        twice = (a[..., :, k : k + 1].astype(np.float64) * b[..., k : k + 1, :] + twice).astype(F32)
        if k == 1:
            assert (twice[0, 5, 40:] != plain[0, 5, 40:]).any()
    fast = fused_fold(np.swapaxes(a, -1, -2), b)
    assert fast.tobytes() == plain.tobytes()


def test_the_fast_fold_is_exact_at_a_subnormal_midpoint():
    """c = 2^-130 + 2^-149, a * b = 2^-150 - 2^-190: the binary64 sum rounds onto the midpoint 2^-130 + 1.5 *
    2^-149, whose significand has no bit where a normal binary32's midpoint has one; rounding that to even
    goes up, the exact value is below it: down. Only the test of sums below 2^-126 catches it."""
    a, b = F32(2.0**-75 * (1 + 2.0**-20)), F32(2.0**-75 * (1 - 2.0**-20))
    c = F32(2.0**-130 + 2.0**-149)
    want = fma_exact(a, b, c)
    assert want == c  # rounded down: the exact sum is below the midpoint
    twice = F32(np.float64(a) * np.float64(b) + np.float64(c))
    assert twice != want  # the baseline: rounding twice goes up
    got = fused_fold(np.array([[1.0], [a]], F32), np.array([[c], [b]], F32))  # (K, M) = (K, N) = (2, 1)
    assert same_bits(got[0, 0], want)
    assert same_bits(fma(a, b, c), want)
    # Through the reference's matmul, which skips that test only when no product is small enough to need it.
    product = get_backend("reference", 2).matmul(np.array([[1.0, a]], F32), np.array([[c], [b]], F32))
    assert same_bits(product[0, 0], want)
