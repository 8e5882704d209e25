"""kernels/cpu_lab_math.py (the cpu backend's op-table-1 functions, compiled) bit for bit kernels/lab_math.py's
(numpy ufunc chains: the definition and the reference backend's code), on special values, the domains' edges,
random bit patterns and each function's range, in any shape; the same refusals, word for word."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels import KernelInputError, cpu_lab_math, lab_math
from tests.lab.triton_probe import UNARY, probe_inputs

F32 = np.float32


def bits_differ(a: np.ndarray, b: np.ndarray) -> int:
    """Elements whose bits differ, any two NaNs alike (which NaN a NaN operand leaves is open: docs/arithmetic.md
    section 1; LLVM may commute a product's operands, numpy keeps the first NaN)."""
    a, b = np.asarray(a), np.asarray(b)
    return int(np.count_nonzero((a.view(np.uint32) != b.view(np.uint32)) & ~(np.isnan(a) & np.isnan(b))))


@pytest.mark.parametrize("name", UNARY)
def test_each_function_is_lab_maths_bit_for_bit(name):
    x = probe_inputs(1)
    assert bits_differ(getattr(cpu_lab_math, name)(x), getattr(lab_math, name)(x)) == 0
    square = x[: 60 * 70].reshape(60, 70)  # any shape; the large one on every thread, the others on one
    big = np.tile(x, -(-cpu_lab_math.PARALLEL_MIN // x.size)).reshape(-1, 2)
    assert big.size >= cpu_lab_math.PARALLEL_MIN > x.size
    for v in (square, np.ascontiguousarray(square[:, ::3]), x[:0], x[:1].reshape(()), big):
        got, want = getattr(cpu_lab_math, name)(v), getattr(lab_math, name)(v)
        assert got.shape == want.shape == v.shape and bits_differ(got, want) == 0


def test_gelu_backward_and_pow_with_a_scalar_base_are_lab_maths_bit_for_bit():
    x = probe_inputs(1)
    dy = probe_inputs(2)[: x.size]
    for reps in (1, -(-cpu_lab_math.PARALLEL_MIN // x.size)):  # on one thread, then on every thread
        x, dy = np.tile(x, reps), np.tile(dy, reps)
        assert bits_differ(cpu_lab_math.gelu_tanh_backward(x, dy), lab_math.gelu_tanh_backward(x, dy)) == 0
        for base in (2.0, 10000.0, 0.5, 1e-30, 3.4e38):
            got = cpu_lab_math.pow_scalar_base(F32(base), x)
            assert bits_differ(got, lab_math.pow_scalar_base(F32(base), x)) == 0
    rope = np.arange(0, 64, 2, dtype=F32) / F32(64)  # RoPE's exponents, as a lab's model writes them
    assert (
        bits_differ(cpu_lab_math.pow_scalar_base(F32(10000.0), rope), lab_math.pow_scalar_base(F32(10000.0), rope)) == 0
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=300))
def test_any_bit_patterns(bits):
    x = np.array(bits, dtype=np.uint64).astype(np.uint32).view(F32)
    for name in UNARY:
        assert bits_differ(getattr(cpu_lab_math, name)(x), getattr(lab_math, name)(x)) == 0, name
    assert (
        bits_differ(cpu_lab_math.gelu_tanh_backward(x, x[::-1].copy()), lab_math.gelu_tanh_backward(x, x[::-1].copy()))
        == 0
    )


def _message(fn) -> str:
    try:
        fn()
    except KernelInputError as e:
        return str(e)
    return "no KernelInputError"


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.sin(np.ones(2)),  # float64
        lambda m: m.tanh(np.ones(3, np.int32)),
        lambda m: m.gelu_tanh_backward(np.ones(2, F32), np.ones(3, F32)),  # shapes differ
        lambda m: m.pow_scalar_base(F32(-2.0), np.ones(2, F32)),
        lambda m: m.pow_scalar_base(F32(np.inf), np.ones(2, F32)),
        lambda m: m.rsqrt([1.0, 2.0]),  # not an array
        lambda m: m.cos(np.ones((4, 4), F32)[:, ::2]),  # strided
    ],
)
def test_refusals_are_lab_maths_word_for_word(call):
    want = _message(lambda: call(lab_math))
    assert want != "no KernelInputError" and _message(lambda: call(cpu_lab_math)) == want


_TWINS = """
import numpy as np
from kernels import cpu_lab_math as lm
x = np.ones(8, np.float32)
pairs = [(lm._unary_serial, lm.unary_flat, (lm.SIN, x, x.copy())),
         (lm._gelu_backward_serial, lm.gelu_tanh_backward_flat, (x, x, x.copy())),
         (lm._exp_scaled_serial, lm.exp_scaled_flat, (x, np.float32(0.5), x.copy()))]
for serial, parallel, args in pairs:
    serial(*args)  # compiled first, and written to the (empty) cache
    parallel(*args)
    print(serial.py_func.__name__, sum(parallel.stats.cache_hits.values()), sum(parallel.stats.cache_misses.values()))
"""


@pytest.mark.slow  # 10 s: six compiles into an empty cache
def test_each_serial_twin_has_its_own_cache_entry(tmp_path):
    """A serial twin compiled first must not be what its parallel kernel loads from numba's disk cache (a
    twin of the same Python function once was: whichever compiled first ran for both)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _TWINS], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")[:3]
    assert lines == [f"{name} 0 1" for name in ("_unary_serial", "_gelu_backward_serial", "_exp_scaled_serial")]
