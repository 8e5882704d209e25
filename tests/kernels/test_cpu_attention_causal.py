"""The cpu backend leaves out the causal half of the attention products only where no bit can change."""

import numpy as np
import pytest

import kernels
import kernels.cpu_matmul as mm

REF = kernels.get_backend("reference")
CPU = kernels.get_backend("cpu")
F32 = np.float32


def _same(a, b) -> bool:
    return all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


def _inputs(bh, t, d, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((bh, t, d)).astype(F32) for _ in range(4)]


# Sizes around ROW_BLOCK (32), K_BLOCK and PANEL_COLS (128), and a panel-less narrow head.
@pytest.mark.parametrize("t", [1, 2, 31, 32, 33, 127, 128, 129, 200, 257])
def test_attention_and_its_backward_equal_the_reference(t):
    q, k, v, do = _inputs(2, t, 8 if t < 128 else 24, t)
    o, p = CPU.attention(q, k, v)
    assert _same((o, p), REF.attention(q, k, v))
    assert _same(CPU.attention_backward(q, k, v, p, do), REF.attention_backward(q, k, v, p, do))


@pytest.mark.parametrize("where", ["q", "k", "v", "do"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_non_finite_operand_takes_the_full_fold(where, bad):
    q, k, v, do = _inputs(2, 70, 8, 5)
    named = {"q": q, "k": k, "v": v, "do": do}
    named[where][1, 69, 3] = bad  # the last position: a masked row for every earlier one
    o, p = CPU.attention(q, k, v)
    assert _same((o, p), REF.attention(q, k, v))
    assert _same(CPU.attention_backward(q, k, v, p, do), REF.attention_backward(q, k, v, p, do))


def test_a_callers_p_with_non_zero_masked_entries_takes_the_full_fold():
    q, k, v, do = _inputs(3, 40, 16, 6)
    p = np.random.default_rng(6).random((3, 40, 40)).astype(F32)
    assert not mm.masked_zeros(p)
    assert _same(CPU.attention_backward(q, k, v, p, do), REF.attention_backward(q, k, v, p, do))
    p = np.tril(p)
    p[0, 0, 5] = -0.0  # a negative zero is still a zero
    assert mm.masked_zeros(p)
    assert _same(CPU.attention_backward(q, k, v, p, do), REF.attention_backward(q, k, v, p, do))


def test_the_skips_are_taken_and_the_finiteness_check_is_what_keeps_them_exact():
    """On a lower-triangular A the skipping modes give FULL's bits for a finite B, and not for an
    infinite one (+0.0 x inf is NaN in the full fold): the kernel really leaves those terms out."""
    rng = np.random.default_rng(9)
    t, d = 150, 8
    a = np.tril(rng.standard_normal((1, t, t)).astype(F32))
    b = rng.standard_normal((1, t, d)).astype(F32)
    full = mm.matmul_batched(a, False, b, False, d, mm.FULL)
    assert full.tobytes() == mm.matmul_batched(a, False, b, False, d, mm.K_UPTO_ROW).tobytes()
    # a given as the transpose: the product's A is upper triangular, zeros lead each row's fold
    full_t = mm.matmul_batched(a, True, b, False, d, mm.FULL)
    assert full_t.tobytes() == mm.matmul_batched(a, True, b, False, d, mm.K_FROM_ROW).tobytes()
    b[0, t - 1, 0] = np.inf  # row t-1 of B meets only masked zeros, except in the last row of A
    assert np.isnan(mm.matmul_batched(a, False, b, False, d, mm.FULL)[0, 0, 0])
    assert not np.isnan(mm.matmul_batched(a, False, b, False, d, mm.K_UPTO_ROW)[0, 0, 0])
    s = mm.matmul_batched(b[:, :, :], False, b, True, t, mm.COLS_UPTO_ROW)
    assert (s[0, :32, 128:] == 0).all()  # a block wholly past the diagonal is not computed
