"""The cpu backend leaves out the causal half of the attention products only where no bit can change."""

import numpy as np
import pytest

import kernels
import kernels.cpu_matmul as mm
from kernels import cpu_attention as ca

REF = kernels.get_backend("reference")
CPU = kernels.get_backend("cpu")
REF2 = kernels.get_backend("reference", 2)
F32 = np.float32


def _same(a, b) -> bool:
    return all(x.tobytes() == y.tobytes() for x, y in zip(a, b, strict=True))


def _inputs(bh, t, d, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((bh, t, d)).astype(F32) for _ in range(4)]


# Sizes around TILE_ROWS (12), TILE_COLS (32), K_BLOCK (128), the task's 192 rows and 384 columns, and a narrow head.
@pytest.mark.parametrize("t", [1, 2, 11, 12, 13, 31, 32, 33, 64, 65, 127, 128, 129, 191, 193, 200, 257, 385])
def test_attention_and_its_backward_equal_the_reference(t):
    q, k, v, do = _inputs(2, t, 8 if t < 128 else 24, t)
    o, p = CPU.attention(q, k, v)
    assert _same((o, p), REF.attention(q, k, v))
    assert _same(CPU.attention_backward(q, k, v, p, do), REF.attention_backward(q, k, v, p, do))


@pytest.mark.parametrize("d", [32, 40, 64, 65])
def test_heads_of_one_column_panel_and_of_several_equal_the_reference(d):
    """D = 32 is one panel of columns (cpu_attention.columns reads q, k, v and do in place); 40, 64 and 65 are
    two or three (packed, the last padded with +0.0)."""
    q, k, v, do = _inputs(3, 70, d, d)
    o, p = CPU.attention(q, k, v)
    assert _same((o, p), REF.attention(q, k, v))
    assert _same(CPU.attention_backward(q, k, v, p, do), REF.attention_backward(q, k, v, p, do))
    x = q.reshape(-1)[: 3 * 70 * d].reshape(3, 70, d)
    assert (ca.columns(x).base is not None) == (d == 32)  # a view exactly where D is one panel
    packed = ca.columns(np.ascontiguousarray(q[:, :, ::-1]))
    assert packed.shape == (3, -(-d // 32), 70, 32) and not packed[:, -1, :, d % 32 or 32 :].any()


@pytest.mark.parametrize("where", ["q", "k", "v", "do"])
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_a_non_finite_operand_takes_the_full_fold(where, bad, backward_tasks):
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


@pytest.mark.parametrize("value", [np.nan, 1e-45, -np.inf, 1.0])
@pytest.mark.parametrize("where", [(0, 0, 1), (2, 38, 39), (1, 0, 39), (2, 20, 21)])
def test_masked_zeros_sees_one_non_zero_anywhere_past_the_diagonal(value, where):
    """The threaded, branch-free count: one non-zero (NaN, a subnormal, inf) at the mask's first and last
    places, in the first and last head, is found; the same value on or below the diagonal is not its business."""
    p = np.tril(np.random.default_rng(7).random((3, 40, 40)).astype(F32))
    assert mm.masked_zeros(p)
    z, t, j = where
    p[z, j, t] = value  # below the diagonal: allowed
    assert mm.masked_zeros(p)
    p[where] = value
    assert not mm.masked_zeros(p)


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


@pytest.mark.parametrize("tail_sign", [1.0, -1.0])
def test_version_2_carries_a_negative_zero_through_the_terms_it_leaves_out(tail_sign):
    """fma(a, b, +0.0) of a tiny negative product is -0.0; a trailing masked +0.0 times a b >= 0 makes it
    +0.0 again in the full fold, so the skipping fold must carry every -0.0 through the left-out terms."""
    t, d = 70, 3  # the first row block (32 rows) folds k < 32 and leaves out k >= 32
    a = np.zeros((1, t, t), F32)
    a[0, :, 0] = F32(-(2.0**-80))  # only k = 0 is non-zero: a[i, 0] * b[0, j] = -2^-160, rounded: -0.0
    b = np.full((1, t, d), F32(tail_sign), F32)
    b[0, :32] = F32(-1.0)  # +0.0 x -1 = -0.0: the terms kept leave the -0.0 as it is
    b[0, 0] = F32(2.0**-80)
    full = mm.matmul_batched(a, False, b, False, d, mm.FULL, fused=True)
    skipped = mm.matmul_batched(a, False, b, False, d, mm.K_UPTO_ROW, fused=True)
    # past k = 32 the zeros' products are +0.0 x tail_sign: +0.0 turns the -0.0 into +0.0, -0.0 leaves it
    assert (full == 0).all() and (np.signbit(full[0, :32]) == (tail_sign < 0)).all()
    assert full.tobytes() == skipped.tobytes()
    assert full.tobytes() == REF2.matmul(a, b).tobytes()
    # version 1 rounds the product to -0.0 first, and +0.0 + -0.0 is +0.0: no accumulator is ever -0.0
    assert not np.signbit(mm.matmul_batched(a, False, b, False, d, mm.K_UPTO_ROW)).any()


@pytest.mark.parametrize("tail_sign", [1.0, -1.0])
def test_the_attention_kernel_carries_a_negative_zero_as_the_full_fold_does(tail_sign):
    """kernels/cpu_attention.py folds P v of a row panel only up to the panel's last row: with q = k = 0,
    p[t, j] = 1/(t+1) and v[j] = -2^-149 for j < 12, rows 1..11 fold to -0.0 in version 2 (each product
    rounds to -0.0); the masked terms past row 11, +0.0 x tail_sign, make them +0.0 in the full fold or keep
    them. The kernel must give the reference's (full) bits either way, and version 1 its own."""
    t = 40
    q = np.zeros((1, t, 1), F32)
    v = np.full((1, t, 1), F32(tail_sign), F32)
    v[0, :12] = -np.float32(2.0**-149)
    cpu2 = kernels.get_backend("cpu", 2)
    o, p = cpu2.attention(q, q, v)
    assert _same((o, p), REF2.attention(q, q, v))
    assert (o[0, 1:12] == 0).all() and (np.signbit(o[0, 1:12]) == (tail_sign < 0)).all()
    assert _same(CPU.attention(q, q, v), REF.attention(q, q, v))


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 13, 40), (1, 100, 33), (2, 45, 64), (5, 7, 96)])
def test_the_attention_kernel_is_the_reference_for_every_panel_and_head_size(version, shape):
    """One batch element or several, T below and across the 12-row panels and 32-key panels, D below,
    at and across 32 (V's panels padded), the zigzag order of panels: the reference's o and p exactly."""
    rng = np.random.default_rng(sum(shape) + version)
    q, k, v = ((rng.standard_normal(shape) * 3).astype(F32) for _ in range(3))
    cpu = kernels.get_backend("cpu", version)
    ref = kernels.get_backend("reference", version)
    assert _same(cpu.attention(q, k, v), ref.attention(q, k, v))
    v[0, -1, 0] = np.inf  # the full fold: +0.0 x inf is NaN in every earlier row
    assert _same(cpu.attention(q, k, v), ref.attention(q, k, v))


@pytest.fixture(params=["panels", "heads"])
def backward_tasks(request, monkeypatch):
    """Run the test with the backward's tasks cut per panel of rows, then per head (cpu_attention.by_heads
    decides which in use; both must give the reference's bits)."""
    monkeypatch.setattr(ca, "by_heads", lambda bh, t, threads: request.param == "heads")
    return request.param


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 13, 40), (1, 100, 33), (2, 45, 64), (5, 7, 96)])
def test_the_attention_backward_kernel_is_the_reference(version, shape, backward_tasks):
    """The backward kernel's dq, dk, dv against the reference's composition, with every fold leaving out
    its masked terms, then with each operand that forces a full fold made non-finite in turn."""
    rng = np.random.default_rng(sum(shape) * 3 + version)
    q, k, v, do = ((rng.standard_normal(shape) * 3).astype(F32) for _ in range(4))
    cpu = kernels.get_backend("cpu", version)
    ref = kernels.get_backend("reference", version)
    _, p = ref.attention(q, k, v)
    assert _same(cpu.attention_backward(q, k, v, p, do), ref.attention_backward(q, k, v, p, do))
    for name in ("q", "k", "do"):
        named = {"q": q.copy(), "k": k.copy(), "v": v, "do": do.copy()}
        named[name][0, -1, 0] = np.nan
        a = (named["q"], named["k"], named["v"], p, named["do"])
        assert _same(cpu.attention_backward(*a), ref.attention_backward(*a)), name


@pytest.mark.parametrize("tail_sign", [1.0, -1.0])
def test_the_attention_backward_kernel_carries_dqs_negative_zero(tail_sign, backward_tasks):
    """dq = dS k folds a query panel's j only up to its last row. With p[t, j] = 1/(t+1), v = (1, 0, ...),
    do = 2^-100 and k = (-2^-60, 2^-60 x 11, tail_sign x 2^-60 ...), every product of row 11's fold rounds
    to -0.0 in version 2; the masked terms past j = 11 (+0.0 x tail_sign) end it +0.0 or keep it -0.0 in the
    full fold, and the kernel must carry it through them as the reference does."""
    t = 40
    p = np.tril(np.ones((1, t, t), F32) / np.arange(1, t + 1, dtype=F32)[None, :, None])
    v = np.zeros((1, t, 1), F32)
    v[0, 0] = 1.0
    do = np.full((1, t, 1), F32(2.0**-100), F32)
    k = np.full((1, t, 1), F32(tail_sign * 2.0**-60), F32)
    k[0, 0], k[0, 1:12] = -(2.0**-60), 2.0**-60
    q = np.ones((1, t, 1), F32)
    cpu2 = kernels.get_backend("cpu", 2)
    dq = cpu2.attention_backward(q, k, v, p, do)[0]
    assert _same(cpu2.attention_backward(q, k, v, p, do), REF2.attention_backward(q, k, v, p, do))
    assert dq[0, 11, 0] == 0 and np.signbit(dq[0, 11, 0]) == (tail_sign < 0)


@pytest.mark.parametrize(
    "bh,t,threads,want",
    [
        (32, 256, 2, True),  # the 11m step's 4 x 8 heads
        (12, 1024, 2, True),  # the 125m shape's heads at its longest T
        (12, 1025, 2, False),  # past HEADS_MAX_T: a thread's dS of one head would pass 4 MiB
        (3, 256, 2, False),  # three heads on two threads: one thread would take two
        (9, 256, 2, True),  # at least four a thread: the odd one out is a small share
        (1, 256, 2, False),
    ],
)
def test_which_backward_tasks(bh, t, threads, want):
    assert ca.HEADS_MAX_T == 1024
    assert ca.by_heads(bh, t, threads) == want
