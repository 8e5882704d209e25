"""The reference backend equals a literal, one-scalar-at-a-time reading of docs/arithmetic.md.

The reference is vectorised (padded rows, masked lanes, rounds of the
embedding scatter); this file transcribes the document line by line with
numpy.float32 scalars and plain loops, on small inputs, so a vectorisation
mistake in the reference cannot hide behind the other backends copying it.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from kernel_cases import OPS, SEED, SPECIALS, as_outputs, build_cases, compare_outputs, sprinkle, tiny, wide

from kernels import constants as K
from kernels import get_backend
from tests.kernels.rational_fma import fma_exact

f32 = np.float32


def bits_to_f32(b: int) -> np.float32:
    return f32(struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0])


def f32_to_bits(x: np.float32) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def spec_psum(xs) -> np.float32:
    n = len(xs)
    if n == 0:
        return f32(0.0)
    p = 1
    while p < n:
        p *= 2
    s = [f32(x) for x in xs] + [f32(-0.0)] * (p - n)
    w = p // 2
    while w >= 1:
        for i in range(w):
            s[i] = s[i] + s[i + w]
        w //= 2
    return s[0]


def spec_max2(a, b):
    if np.isnan(a) or np.isnan(b):
        return f32(np.nan)
    return b if b > a else a


def spec_pmax(xs) -> np.float32:
    p = 1
    while p < len(xs):
        p *= 2
    s = [f32(x) for x in xs] + [f32(-np.inf)] * (p - len(xs))
    w = p // 2
    while w >= 1:
        for i in range(w):
            s[i] = spec_max2(s[i], s[i + w])
        w //= 2
    return s[0]


def spec_dot(a, b) -> np.float32:
    acc = f32(0.0)
    for x, y in zip(a, b):
        acc = acc + x * y
    return acc


def spec_exp(x: np.float32) -> np.float32:
    if np.isnan(x):
        return f32(np.nan)
    if x > f32(89.0):
        return f32(np.inf)
    if x < f32(-104.0):
        return f32(0.0)
    t = x * K.LOG2E
    n = (t + K.SHIFTER) - K.SHIFTER
    r = (x - n * K.LN2_HI) - n * K.LN2_LO
    q = K.C7
    for c in (K.C6, K.C5, K.C4, K.C3, K.C2):
        q = q * r + c
    p = f32(1.0) + (r + (r * r) * q)
    ni = int(n)
    n1 = ni // 2  # floor
    n2 = ni - n1
    return (p * bits_to_f32((n1 + 127) << 23)) * bits_to_f32((n2 + 127) << 23)


def spec_log(x: np.float32) -> np.float32:
    if np.isnan(x) or x < 0:
        return f32(np.nan)
    if x == 0:
        return f32(-np.inf)
    if x == np.inf:
        return f32(np.inf)
    adj = 0
    if x < bits_to_f32(0x00800000):
        x = x * K.TWO23
        adj = -23
    bits = f32_to_bits(x)
    e = ((bits >> 23) & 0xFF) - 127 + adj
    m = bits_to_f32((bits & 0x7FFFFF) | 0x3F800000)
    if m > K.SQRT2:
        m = m * f32(0.5)
        e = e + 1
    fm = m - f32(1.0)
    s = fm / (f32(2.0) + fm)
    z = s * s
    q = K.L11
    for c in (K.L9, K.L7, K.L5, K.L3):
        q = q * z + c
    q = q * z
    u = s + s
    lm = u + u * q
    E = f32(e)
    return E * K.LN2_HI + (E * K.LN2_LO + lm)


def spec_softmax_row(row, t):
    m = spec_pmax(row[: t + 1])
    e = [spec_exp(row[j] - m) for j in range(t + 1)]
    s = spec_psum(e)
    return [e[j] / s if j <= t else f32(0.0) for j in range(len(row))]


def spec_matmul(a, b):  # a (M, K), b (K, N)
    return np.array([[spec_dot(a[i, :], b[:, j]) for j in range(b.shape[1])] for i in range(a.shape[0])], f32)


def spec_softmax(s):  # (BH, T, T)
    return np.array([[spec_softmax_row(s[h, t], t) for t in range(s.shape[1])] for h in range(s.shape[0])], f32)


def spec_softmax_backward(p, dp):
    out = np.zeros_like(p)
    for h in range(p.shape[0]):
        for t in range(p.shape[1]):
            c = spec_psum([p[h, t, j] * dp[h, t, j] for j in range(t + 1)])
            for j in range(t + 1):
                out[h, t, j] = p[h, t, j] * (dp[h, t, j] - c)
    return out


def spec_elementwise(fn, x):
    with np.errstate(all="ignore"):
        return np.array([fn(v) for v in x.reshape(-1)], dtype=f32).reshape(x.shape)


@pytest.fixture()
def rng(request):
    return np.random.default_rng([SEED, len(request.node.name)])


def assert_same(got, want):
    msg = compare_outputs(got, want)
    assert msg is None, msg


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (4, 17), (2, 0)])
def test_reductions_follow_spec(reference, rng, shape):
    x = sprinkle(rng, wide(rng, shape), 2)
    with np.errstate(all="ignore"):
        assert_same(reference.sum_rows(x), np.array([spec_psum(r) for r in x], f32).reshape(shape[0]))
        assert_same(reference.sum_cols(x), np.array([spec_psum(c) for c in x.T], f32).reshape(shape[1]))
        if shape[1]:
            assert_same(reference.max_rows(x), np.array([spec_pmax(r) for r in x], f32))


def test_signed_zero_trees_follow_spec(reference):
    x = np.array([[-0.0, 0.0], [0.0, -0.0], [-0.0, -0.0]], dtype=f32)
    assert_same(reference.max_rows(x), np.array([-0.0, 0.0, -0.0], f32))  # max2 keeps a on ties
    assert_same(reference.sum_rows(x), np.array([0.0, 0.0, -0.0], f32))
    assert_same(reference.sum_rows(np.zeros((2, 0), f32)), np.array([0.0, 0.0], f32))


@pytest.mark.parametrize("mkn", [(1, 1, 1), (3, 7, 5), (4, 0, 2)])
def test_matmuls_follow_spec(reference, rng, mkn):
    m, k, n = mkn
    a, b = sprinkle(rng, wide(rng, (m, k)), 1), tiny(rng, (k, n)) * f32(2.0**60)
    with np.errstate(all="ignore"):
        want = spec_matmul(a, b)
    assert_same(reference.matmul(a, b), want)
    assert_same(reference.matmul_nt(a, np.ascontiguousarray(b.T)), want)
    assert_same(reference.matmul_tn(np.ascontiguousarray(a.T), b), want)
    batched = reference.matmul(np.stack([a, a]), np.stack([b, b]))
    assert_same(batched, np.stack([want, want]))


def test_exp_log_silu_follow_spec(reference, rng):
    x = np.concatenate([SPECIALS, rng.uniform(-110, 95, 600).astype(f32),
                        rng.integers(0, 2**32, 600, dtype=np.uint64).astype(np.uint32).view(f32)])  # fmt: skip
    assert_same(reference.exp(x), spec_elementwise(spec_exp, x))
    assert_same(reference.log(x), spec_elementwise(spec_log, x))
    silu = spec_elementwise(lambda v: v / (f32(1.0) + spec_exp(-v)), x)
    assert_same(reference.silu(x), silu)
    dy = wide(rng, x.shape)

    def dsilu(v):
        s = f32(1.0) / (f32(1.0) + spec_exp(-v))
        return s * (f32(1.0) + v * (f32(1.0) - s))

    with np.errstate(all="ignore"):
        assert_same(reference.silu_backward(x, dy), dy * spec_elementwise(dsilu, x))


def test_silu_backward_multiplies_by_dy_last(reference, rng):
    # Section 3.3: dx = dy * g with g = s * (1 + x * (1 - s)). Reading the formula
    # as (dy * s) * (1 + x * (1 - s)) rounds differently; these inputs tell the two apart.
    x, dy = wide(rng, (4000,), spread=4), wide(rng, (4000,), spread=4)
    with np.errstate(all="ignore"):
        s = f32(1.0) / (f32(1.0) + reference.exp(-x))
        h = f32(1.0) + x * (f32(1.0) - s)
        spec, other = dy * (s * h), (dy * s) * h
    assert np.count_nonzero(spec != other) > 100
    assert_same(reference.silu_backward(x, dy), spec)


def test_softmax_and_attention_follow_spec(reference, rng):
    q, k, v, do = (wide(rng, (2, 5, 3), spread=2) for _ in range(4))
    scale = f32(1.0) / np.sqrt(f32(3))
    with np.errstate(all="ignore"):
        s = np.stack([spec_matmul(q[h], np.ascontiguousarray(k[h].T)) for h in range(2)]) * scale
        p = spec_softmax(s)
        o = np.stack([spec_matmul(p[h], v[h]) for h in range(2)])
    assert_same(reference.softmax_causal(s), p)
    assert_same(reference.attention(q, k, v), (o, p))
    dp = np.stack([spec_matmul(do[h], np.ascontiguousarray(v[h].T)) for h in range(2)])
    dv = np.stack([spec_matmul(np.ascontiguousarray(p[h].T), do[h]) for h in range(2)])
    ds = spec_softmax_backward(p, dp)
    dq = np.stack([spec_matmul(ds[h], k[h]) for h in range(2)]) * scale
    dk = np.stack([spec_matmul(np.ascontiguousarray(ds[h].T), q[h]) for h in range(2)]) * scale
    assert_same(reference.softmax_causal_backward(p, dp), ds)
    assert_same(reference.attention_backward(q, k, v, p, do), (dq, dk, dv))


def test_rmsnorm_follows_spec(reference, rng):
    x, dy = wide(rng, (3, 6)), wide(rng, (3, 6))
    x[1] = 0.0
    w, eps = wide(rng, (6,), spread=1), f32(1e-5)
    rstd = np.array([f32(1.0) / np.sqrt(spec_psum(r * r) / f32(6) + eps) for r in x], f32)
    xhat = x * rstd[:, None]
    y = xhat * w
    g = dy * w
    kr = np.array([spec_psum(g[i] * xhat[i]) / f32(6) for i in range(3)], f32)
    dx = (g - xhat * kr[:, None]) * rstd[:, None]
    dw = np.array([spec_psum((dy * xhat)[:, c]) for c in range(6)], f32)
    assert_same(reference.rmsnorm(x, w, 1e-5), (y, rstd))
    assert_same(reference.rmsnorm_backward(x, w, rstd, dy), (dx, dw))


def test_cross_entropy_follows_spec(reference, rng):
    logits, t = wide(rng, (5, 7), spread=3), rng.integers(0, 7, 5)
    rows = []
    for i in range(5):
        m = spec_pmax(logits[i])
        e = [spec_exp(v - m) for v in logits[i]]
        s = spec_psum(e)
        rows.append((m + spec_log(s) - logits[i, t[i]], [e_j / s for e_j in e]))
    loss = spec_psum([r[0] for r in rows]) / f32(5)
    # dloss is rounded to float32 before the division by N: for 0.3 and N = 5
    # that differs from dividing in binary64 and rounding once, so the test tells them apart.
    g = f32(0.3) / f32(5)
    assert g != f32(0.3 / 5)
    dl = np.array([[(q - f32(j == t[i])) * g for j, q in enumerate(rows[i][1])] for i in range(5)], f32)
    assert_same(reference.cross_entropy(logits, t), np.array(loss, f32))
    assert_same(reference.cross_entropy_backward(logits, t, 0.3), dl)


def test_embedding_follows_spec(reference, rng):
    idx = rng.integers(0, 4, 40)
    dout = sprinkle(rng, wide(rng, (40, 3)), 3)
    table = wide(rng, (4, 3))
    want = np.zeros((6, 3), f32)
    with np.errstate(all="ignore"):
        for n in range(40):
            want[idx[n]] = want[idx[n]] + dout[n]
    assert_same(reference.embedding_backward(idx, dout, 6), want)
    assert_same(reference.embedding(table, idx), np.array([table[i] for i in idx], f32))


def spec_powi(b, t):
    r = f32(1.0)
    while t > 0:
        if t % 2:
            r = r * b
        b = b * b
        t //= 2
    return r


@pytest.mark.parametrize("step", [1, 2, 5, 1000])
def test_adamw_follows_spec(reference, rng, step):
    p, g, m = wide(rng, (9,)), wide(rng, (9,), spread=10), wide(rng, (9,))
    v = np.abs(wide(rng, (9,)))
    lr, b1, b2, eps, wd = f32(1e-3), f32(0.9), f32(0.999), f32(1e-8), f32(0.1)
    ss = lr / (f32(1.0) - spec_powi(b1, step))
    sbc2 = np.sqrt(f32(1.0) - spec_powi(b2, step))
    m2 = np.array([b1 * m[i] + (f32(1.0) - b1) * g[i] for i in range(9)], f32)
    v2 = np.array([b2 * v[i] + (f32(1.0) - b2) * (g[i] * g[i]) for i in range(9)], f32)
    p2 = np.array([p[i] * (f32(1.0) - lr * wd) - ss * (m2[i] / (np.sqrt(v2[i]) / sbc2 + eps)) for i in range(9)], f32)
    assert_same(reference.adamw(p, g, m, v, step, 1e-3, 0.9, 0.999, 1e-8, 0.1), (p2, m2, v2))


def test_reference_outputs_are_float32_arrays(reference):
    # A float64 intermediate that leaked out would show here; one rounded
    # back to float32 is caught by the transcriptions above.
    for op in OPS:
        for label, args in build_cases(op, SEED, small=True):
            for out in as_outputs(getattr(reference, op)(*args)):
                assert isinstance(out, np.ndarray) and out.dtype == np.float32, f"{op} [{label}]: {type(out)}"
                assert out.flags.c_contiguous, f"{op} [{label}] output is not C-contiguous"


# ------------------------------------------------- version 2 (section 7): the fused fold


def spec_matmul_v2(a, b) -> np.ndarray:
    """Section 7.2 read literally: acc = fma(a[i, k], b[k, j], acc), with fma by exact rational arithmetic."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), f32)
    for i in range(m):
        for j in range(n):
            acc = f32(0.0)
            for kk in range(k):
                acc = fma_exact(a[i, kk], b[kk, j], acc)
            out[i, j] = acc
    return out


@pytest.mark.parametrize("mkn", [(1, 1, 1), (3, 7, 5), (4, 0, 2), (5, 40, 3)])
def test_version_2_matmuls_follow_spec(rng, mkn):
    m, k, n = mkn
    a, b = sprinkle(rng, wide(rng, (m, k)), 1), tiny(rng, (k, n)) * f32(2.0**60)
    want = spec_matmul_v2(a, b)
    for backend in (get_backend("reference", 2), get_backend("cpu", 2)):
        assert_same(backend.matmul(a, b), want)
        assert_same(backend.matmul_nt(a, np.ascontiguousarray(b.T)), want)
        assert_same(backend.matmul_tn(np.ascontiguousarray(a.T), b), want)


def test_the_documents_example_tells_the_versions_apart():
    """Section 7.2: the fold over [1 x c, a x a] with a = 1 + 2^-12, c = -(1 + 2^-11)."""
    a, c = f32(1 + 2.0**-12), f32(-(1 + 2.0**-11))
    left, right = np.array([[1.0, a]], f32), np.array([[c], [a]], f32)
    for name in ("reference", "cpu"):
        assert_same(get_backend(name, 1).matmul(left, right), np.array([[0.0]], f32))
        assert_same(get_backend(name, 2).matmul(left, right), np.array([[2.0**-24]], f32))
