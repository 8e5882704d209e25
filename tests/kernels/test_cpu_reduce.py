"""The `cpu` reductions and row kernels at the edges of their task splits, bitwise.

sum_rows/max_rows and the row kernels hand ROWS_PER_TASK rows to a task;
sum_cols hands COLS_PER_TASK columns to a task and folds the halving tree
over rows as strided sub-trees of LEAF_ROWS rows (kernels/cpu_reduce.py).
Row counts around those sizes and around powers of two, signed zeros and
special values must give the reference's bits, and the thread count must
change none.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from kernel_cases import SPECIALS, describe_difference

from kernels import KernelInputError, cpu, reference
from kernels.cpu_reduce import COLS_PER_TASK, LEAF_ROWS, ROWS_PER_TASK

F32 = np.float32


def _matrix(rng, rows, cols, specials=True):
    """Values of mixed magnitude (cancellation-prone), with some special values."""
    x = rng.standard_normal((rows, cols)) * rng.choice(np.array([1e-40, 1.0, 1e20], F32), (rows, cols))
    x = x.astype(F32)
    if specials and x.size:
        hit = rng.random(x.shape) < 0.05
        x[hit] = rng.choice(SPECIALS, int(hit.sum()))
    return x


ROW_COUNTS = [0, 1, 2, 3, LEAF_ROWS - 1, LEAF_ROWS, LEAF_ROWS + 1, 2 * LEAF_ROWS + 1, 1025]
COL_COUNTS = [1, COLS_PER_TASK - 1, COLS_PER_TASK + 1, 3 * COLS_PER_TASK]


@pytest.mark.parametrize("rows", ROW_COUNTS)
@pytest.mark.parametrize("cols", COL_COUNTS)
def test_sum_cols_matches_reference(rows, cols):
    x = _matrix(np.random.default_rng(rows * 1000 + cols), rows, cols)
    assert describe_difference(cpu.sum_cols(x), reference.sum_cols(x)) is None


@pytest.mark.parametrize("rows", [0, 1, ROWS_PER_TASK - 1, ROWS_PER_TASK + 1, 3 * ROWS_PER_TASK])
@pytest.mark.parametrize("cols", [0, 1, 2, 15, 16, 17, 128, 513, 1024])  # powers of two: the register trees
@pytest.mark.parametrize("op", ["sum_rows", "max_rows"])
def test_row_reductions_match_reference(op, rows, cols):
    x = _matrix(np.random.default_rng(rows * 1000 + cols), rows, cols)
    if op == "max_rows" and cols == 0:
        with pytest.raises(KernelInputError, match="0 columns, want at least 1"):
            cpu.max_rows(x)
        return
    assert describe_difference(getattr(cpu, op)(x), getattr(reference, op)(x)) is None


def test_padding_is_negative_zero():
    # A column or row of -0.0 sums to -0.0 only if the padding is -0.0 too.
    x = np.full((3, 5), -0.0, F32)
    assert np.all(np.signbit(cpu.sum_cols(x))) and np.all(np.signbit(cpu.sum_rows(x)))
    assert not np.signbit(cpu.sum_cols(np.zeros((0, 2), F32))).any()  # no rows: +0.0


def test_halving_tree_pairs_i_with_i_plus_half():
    # [2^24, 1, -2^24, 1]: halving pairs (0,2),(1,3) -> 0 + 2 = 2; a left fold
    # gives 2^24 + 1 = 2^24 (ulp 2), - 2^24 = 0, + 1 = 1; pairs (0,1),(2,3) give 0.
    row = np.array([[2.0**24, 1.0, -(2.0**24), 1.0]], F32)
    assert cpu.sum_rows(row)[0] == 2.0
    assert cpu.sum_cols(np.ascontiguousarray(row.T))[0] == 2.0


def test_max_rows_signed_zero_order():
    # max2(+0, -0) = +0 and max2(-0, +0) = -0: the tree decides which survives.
    x = np.array([[0.0, -0.0], [-0.0, 0.0]], F32)
    assert list(np.signbit(cpu.max_rows(x))) == [False, True]


@pytest.mark.parametrize(
    "op",
    [
        "matmul",
        "sum_cols",
        "sum_rows",
        "softmax_causal",
        "rmsnorm_backward",
        "cross_entropy_backward",
        "embedding_backward",
    ],
)
def test_thread_count_changes_no_bit(op):
    rng = np.random.default_rng(5)
    x = _matrix(rng, 301, 67, specials=False)
    args = {
        "matmul": (x, _matrix(rng, 67, 150, specials=False)),
        "sum_cols": (x,),
        "sum_rows": (x,),
        "softmax_causal": (_matrix(rng, 67 * 3, 67, specials=False).reshape(3, 67, 67),),
        "rmsnorm_backward": (x, x[0].copy(), np.abs(x[:, 0]) + F32(1), x),
        "cross_entropy_backward": (x, rng.integers(0, 67, 301), 0.5),
        "embedding_backward": (rng.integers(0, 7, 301), x, 7),
    }[op]
    before = numba.get_num_threads()
    results = []
    try:
        for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(threads)
            results.append(getattr(cpu, op)(*args))
    finally:
        numba.set_num_threads(before)
    flat = [r if isinstance(r, tuple) else (r,) for r in results]
    for got in flat[1:]:
        for g, w in zip(got, flat[0]):
            assert describe_difference(g, w) is None


def test_large_add_runs_on_every_thread_with_numpys_bits():
    # cpu.add hands arrays of PARALLEL_ADD elements or more to add_flat (prange); one rounding per element either way.
    from kernels.cpu import PARALLEL_ADD

    rng = np.random.default_rng(9)
    n = PARALLEL_ADD + 17
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    special = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-45, -1e-45, 3.4e38], np.float32)
    a[: special.size], b[: special.size] = special, special[::-1]
    a[-1], b[-1] = np.float32(-0.0), np.float32(-0.0)  # -0.0 + -0.0 is -0.0, which the sum must keep
    got = cpu.add(a, b)
    want = reference.add(a, b)
    assert got.shape == a.shape and got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32)[~np.isnan(want)], want.view(np.uint32)[~np.isnan(want)])
    assert np.isnan(got).sum() == np.isnan(want).sum()
