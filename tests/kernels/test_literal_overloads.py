"""The functions numba compiles once per literal argument (kernels/cpu_elementwise.py _combine and _row,
kernels/cpu_lab_math.py _function: an overload generates the code of the literal op or stride case alone)
keep plain-Python bodies, their definitions: each equals the compiled kernels that use it, bit for bit,
for every op and every stride case."""

from __future__ import annotations

import numpy as np
import pytest

from kernels import cpu_elementwise as ew
from kernels import cpu_lab_math as lm

F32 = np.float32
# binary_rows' geometry over 4 rows of 8 columns (g[4:8] x's strides, g[8:12] y's), one per stride case
CASES = {
    "contiguous": [1, 1, 4, 8, 0, 0, 8, 1, 0, 0, 8, 1, 1, 8],
    "x run, y one": [1, 1, 4, 8, 0, 0, 8, 1, 0, 0, 1, 0, 1, 8],
    "x one, y run": [1, 1, 4, 8, 0, 0, 1, 0, 0, 0, 8, 1, 2, 4],
    "x pairs, y run": [1, 1, 4, 8, 0, 0, 16, 2, 0, 0, 8, 1, 1, 8],
    "x one, y one": [1, 1, 4, 8, 0, 0, 1, 0, 0, 0, 1, 0, 1, 8],
    "strided": [1, 1, 4, 8, 0, 0, 1, 4, 0, 0, 8, 1, 1, 8],
}


def _operands() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(64).astype(F32), rng.standard_normal(64).astype(F32)
    x[3], y[5], y[9] = np.inf, F32(0.0), F32(-0.0)  # inf, and division by both zeros
    return x, y


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("op", [ew.ADD, ew.SUBTRACT, ew.MULTIPLY, ew.DIVIDE, ew.NEGATE])
def test_row_and_combine_are_binary_rows(case, op):
    x, y = _operands()
    g = np.array(CASES[case], np.int64)
    g.flags.writeable = False
    compiled = np.empty(32, F32)
    ew.binary_rows(op, x, y, compiled, g)
    plain = np.empty(32, F32)
    with np.errstate(all="ignore"):
        for k in range(4):  # row k: x from k * g[6], y from k * g[10], columns at strides g[7] and g[11]
            ew._row(op, ew.STRIDED, x, k * g[6], g[7], y, k * g[10], g[11], plain[8 * k : 8 * k + 8])
    assert compiled.view(np.uint32).tolist() == plain.view(np.uint32).tolist()


@pytest.mark.parametrize("op", range(7))
def test_function_is_unary_flat(op):
    x = np.concatenate([_operands()[0][:40], np.array([0.0, -0.0, 1e-40, 70000.0, np.nan], F32)])
    compiled = np.empty_like(x)
    lm.unary_flat(op, x, compiled)
    with np.errstate(all="ignore"):
        plain = np.array([lm._function(op, v) for v in x], F32)
    same = (compiled.view(np.uint32) == plain.view(np.uint32)) | (np.isnan(compiled) & np.isnan(plain))
    assert same.all(), np.flatnonzero(~same)
