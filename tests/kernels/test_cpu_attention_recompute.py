"""The backward that recomputes p a block of query rows at a time gives the stored-p backward's bits, and the
forward that keeps no p gives attention_rows' o and lse."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kernels
from kernels import cpu_attention as ca
from kernels.cpu_attention_recompute import (
    BLOCK_PANELS,
    attention_backward_recomputed,
    block_size,
    heads_keep_threads_busy,
)
from kernels.input_error import KernelInputError
from tests.kernels.test_cpu_attention_causal import _inputs, _same

REF = kernels.get_backend("reference")
REF2 = kernels.get_backend("reference", 2)
F32 = np.float32


def _stored(q, k, v, do, fused):
    """o, lse and the stored-p backward of attention_rows' own p."""
    o, p, lse = ca.attention_rows(q, k, v, not np.isfinite(v).all(), fused)
    return o, lse, ca.attention_backward_checked(q, k, v, p, do, fused, lambda: True)


# Around TILE_ROWS (12), TILE_COLS (32), a block (BLOCK_PANELS * 12 = 96 rows) and two, and head sizes of one column
# panel and of several (the last padded).
@pytest.mark.parametrize("fused", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize(
    "bh,t,d", [(2, 1, 8), (3, 12, 8), (2, 13, 33), (2, 95, 8), (2, 96, 32), (3, 97, 16), (2, 193, 64), (4, 250, 65)]
)
def test_the_recomputed_backward_and_the_unkept_forward_equal_the_stored_ones(bh, t, d, fused):
    q, k, v, do = _inputs(bh, t, d, t * d)
    o, lse, grads = _stored(q, k, v, do, fused)
    assert _same(ca.attention_rows_unkept(q, k, v, False, fused), (o, lse))
    for by_heads, block_panels in ((None, 0), (True, 0), (False, 0), (False, 1), (False, 3)):  # no bit changes
        got = attention_backward_recomputed(q, k, v, do, fused, by_heads, block_panels)
        assert _same(got, grads), (by_heads, block_panels)


def test_heads_are_tasks_where_they_keep_the_threads_evenly_busy():
    assert heads_keep_threads_busy(8, 2) and heads_keep_threads_busy(9, 2) and heads_keep_threads_busy(3, 1)
    assert not heads_keep_threads_busy(1, 2) and not heads_keep_threads_busy(12, 8)
    assert heads_keep_threads_busy(32, 8) and not heads_keep_threads_busy(30, 8)


def test_a_block_has_enough_row_tasks_for_the_threads():
    assert block_size(12, 2) == BLOCK_PANELS
    assert block_size(1, 16) == 16 and block_size(3, 32) == 11 and block_size(12, 96) == BLOCK_PANELS


@pytest.mark.parametrize("fused", [False, True], ids=["v1", "v2"])
def test_they_equal_the_reference_backend(fused):
    q, k, v, do = _inputs(3, 110, 40, 1)
    ref = REF2 if fused else REF
    _, p = ref.attention(q, k, v)
    assert _same(attention_backward_recomputed(q, k, v, do, fused), ref.attention_backward(q, k, v, p, do))


@pytest.mark.parametrize("fused", [False, True], ids=["v1", "v2"])
@pytest.mark.parametrize("where", ["q", "k", "v", "do"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_non_finite_operand_takes_the_full_fold(where, bad, fused):
    """A non-finite value in the last row (masked for every earlier one), or in a block's first: the folds that
    leave masked terms out must take them where +0.0 times it is NaN."""
    q, k, v, do = _inputs(2, BLOCK_PANELS * 12 + 30, 8, 5)
    named = {"q": q, "k": k, "v": v, "do": do}
    named[where][1, BLOCK_PANELS * 12 + 29, 3] = bad
    named[where][0, BLOCK_PANELS * 12, 0] = bad
    o, lse, grads = _stored(q, k, v, do, fused)
    assert _same(ca.attention_rows_unkept(q, k, v, not np.isfinite(v).all(), fused), (o, lse))
    for by_heads, block_panels in ((True, 0), (False, 0), (False, 2)):
        assert _same(attention_backward_recomputed(q, k, v, do, fused, by_heads, block_panels), grads)


@settings(max_examples=25, deadline=None)
@given(
    t=st.integers(1, 2 * BLOCK_PANELS * 12 + 13),
    d=st.sampled_from([1, 7, 32, 33]),
    bh=st.integers(1, 3),
    fused=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    negative_zeros=st.booleans(),
    by_heads=st.sampled_from([None, True, False]),
    block_panels=st.integers(0, 9),
)
def test_any_shape_and_signed_zeros(t, d, bh, fused, seed, negative_zeros, by_heads, block_panels):
    """Version 2 carries an output that ends -0.0 through the terms left out: rows of do and q of -0.0 (and
    +0.0) make such outputs."""
    q, k, v, do = _inputs(bh, t, d, seed)
    if negative_zeros:
        rng = np.random.default_rng(seed)
        for x in (q, do, v):
            x[rng.random(x.shape) < 0.3] = F32(-0.0)
            x[rng.random(x.shape) < 0.1] = F32(0.0)
    o, lse, grads = _stored(q, k, v, do, fused)
    assert _same(ca.attention_rows_unkept(q, k, v, False, fused), (o, lse))
    assert _same(attention_backward_recomputed(q, k, v, do, fused, by_heads, block_panels), grads)


def test_bad_inputs_are_one_line_errors():
    q, k, v, do = _inputs(2, 10, 8, 0)
    with pytest.raises(KernelInputError, match="do"):
        attention_backward_recomputed(q, k, v, do[:, :9], False)
    with pytest.raises(KernelInputError, match="float32"):
        attention_backward_recomputed(q.astype(np.float64), k, v, do, False)
