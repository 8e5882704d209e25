"""Properties of exp and log: monotone, within the stated ulp bound, exact special values.

Hypothesis draws float32 inputs; monotonicity is also checked on every
float32 of windows where it is most at risk (consecutive inputs that share an
output ulp, and the range-reduction seams). The exhaustive walk over all
float32 is tests/kernels/measure_exp_log.py (minutes; not a test).
Checked on every in-process backend (they are bitwise equal anyway).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_cases import IN_PROCESS_BACKENDS
from test_kernels_accuracy import ULP_BOUNDS

from kernels import get_backend

f32 = np.float32
BACKENDS = IN_PROCESS_BACKENDS + ("reference",)
floats32 = st.floats(width=32, allow_nan=False)
batches = st.lists(floats32, min_size=1, max_size=64)


def ulps(y: float, exact: float) -> float:
    """|y - exact| in float32 ulps at exact (2^-149 below the normal range)."""
    _, e = math.frexp(abs(exact))
    return abs(y - exact) / math.ldexp(1.0, max(e - 1, -126) - 23)


def run(backend_name: str, fn: str, values) -> np.ndarray:
    return getattr(get_backend(backend_name), fn)(np.array(values, dtype=f32))


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("fn", ["exp", "log"])
@settings(max_examples=150, deadline=None)
@given(xs=batches)
def test_monotone_on_random_pairs(backend_name, fn, xs):
    x = np.sort(np.array(xs, dtype=f32))
    with np.errstate(over="ignore"):  # the successor of the largest float is inf
        x = np.concatenate([x, np.nextafter(x, f32(np.inf))])  # and each value's successor
    x.sort()
    with np.errstate(invalid="ignore"):
        y = run(backend_name, fn, x)
    keep = ~np.isnan(y)  # log of a negative number is NaN; monotone where defined
    yk = y[keep]
    assert np.all(yk[1:] >= yk[:-1]), [(a, b) for a, b in zip(x[keep], yk)]  # not diff: inf - inf is NaN


def seam_windows(fn: str):
    """float32 arrays of consecutive values around the points where exp/log switch branch."""
    if fn == "exp":
        centres = [(k + 0.5) * math.log(2) for k in range(-6, 6)] + [-0.25, -0.1, 89.0, -104.0, -87.3365]
    else:
        centres = [math.sqrt(2) * 2.0**k for k in range(-130, 128, 7)] + [1.0, 2.0**-126, 0.5]
    for c in centres:
        start = int(np.array([c], f32).view(np.int32)[0]) - 20_000
        bits = np.arange(start, start + 40_000, dtype=np.int32)
        x = bits.view(f32)
        yield x[::-1].copy() if c < 0 else x  # negative floats: bits grow as values fall


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("fn", ["exp", "log"])
def test_monotone_on_consecutive_floats(backend_name, fn):
    dense = np.arange(0xBE851EB8, 0xBE800000, -1, dtype=np.int64).astype(np.uint32).view(f32)  # [-0.26, -0.25)
    windows = list(seam_windows(fn)) + ([dense] if fn == "exp" else [])
    for x in windows:
        y = run(backend_name, fn, x)
        bad = np.flatnonzero(y[1:] < y[:-1])
        assert not bad.size, f"{fn}({x[bad[0]]!r}) = {y[bad[0]]!r} > {fn}({x[bad[0] + 1]!r}) = {y[bad[0] + 1]!r}"


@pytest.mark.parametrize("backend_name", BACKENDS)
@settings(max_examples=200, deadline=None)
@given(xs=st.lists(st.floats(min_value=-104.0, max_value=float(f32(88.72)), width=32), min_size=1, max_size=64))
def test_exp_within_ulp_bound(backend_name, xs):
    y = run(backend_name, "exp", xs)
    for x, v in zip(xs, y):
        assert ulps(float(v), math.exp(x)) <= ULP_BOUNDS["exp"], x


@pytest.mark.parametrize("backend_name", BACKENDS)
@settings(max_examples=200, deadline=None)
@given(
    xs=st.lists(st.floats(min_value=float(f32(1e-45)), max_value=float(f32(3.4e38)), width=32), min_size=1, max_size=64)
)
def test_log_within_ulp_bound(backend_name, xs):
    y = run(backend_name, "log", xs)
    for x, v in zip(xs, y):
        assert ulps(float(v), math.log(x)) <= ULP_BOUNDS["log"], x


SPECIAL = [
    ("exp", 0.0, 1.0), ("exp", -0.0, 1.0), ("exp", -np.inf, 0.0), ("exp", np.inf, np.inf),
    ("exp", 89.5, np.inf), ("exp", -104.5, 0.0), ("exp", np.nan, np.nan), ("exp", -103.9, 1e-45),
    ("log", 1.0, 0.0), ("log", 0.0, -np.inf), ("log", -0.0, -np.inf), ("log", np.inf, np.inf),
    ("log", -1.0, np.nan), ("log", -np.inf, np.nan), ("log", -1e-45, np.nan), ("log", np.nan, np.nan),
]  # fmt: skip


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("fn,x,want", SPECIAL)
def test_special_values_exactly(backend_name, fn, x, want):
    got = run(backend_name, fn, [x])[0]
    if np.isnan(want):
        assert np.isnan(got)
    else:
        assert np.array([got], f32).view(np.uint32)[0] == np.array([want], f32).view(np.uint32)[0], (got, want)
