"""Inputs for every kernel op, and the bitwise comparison of backend outputs.

Shared by the in-process tests, the Triton probe (run under TRITON_INTERPRET=1
in a subprocess) and the invariance probe, so all three see the same cases.
`build_cases(op, rng, small)` returns (label, args) pairs: awkward shapes (1,
primes, non-powers of two, larger than a tile) and, where an op can meet them,
subnormals, signed zeros, infinities and NaN. `small=True` keeps shapes small
enough for the Triton interpreter.
"""

from __future__ import annotations

import numpy as np

NAN_BITS = 0x7FC00000
F32 = np.float32
SEED = 20261129  # fixed: a failure names a case that reproduces
IN_PROCESS_BACKENDS = ("cpu",)  # triton runs under TRITON_INTERPRET=1 in a subprocess
SPECIALS = np.array(
    [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 5.9e-39, -1.1e-38, 1.1754944e-38, 3.4028235e38, -3.4028235e38],
    dtype=F32,
)

OPS = (
    "matmul", "matmul_nt", "matmul_tn", "sum_rows", "sum_cols", "max_rows", "exp", "log", "silu",
    "silu_backward", "softmax_causal", "softmax_causal_backward", "attention", "attention_backward",
    "rmsnorm", "rmsnorm_backward", "cross_entropy", "cross_entropy_backward", "embedding",
    "embedding_backward", "adamw",
)  # fmt: skip


def canonical_bits(a) -> np.ndarray:
    """uint32 bit patterns of a float32 array with every NaN written as 0x7FC00000."""
    a = np.asarray(a)
    bits = np.array(a, dtype=F32, order="C").view(np.uint32)  # a copy; keeps 0-d arrays 0-d
    bits[np.isnan(a)] = NAN_BITS
    return bits


def describe_difference(got, want, name: str = "output") -> str | None:
    """None when got and want are float32 arrays of one shape and equal bits (NaN == NaN), else why not."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"{name}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}"
    gb, wb = canonical_bits(got), canonical_bits(want)
    bad = np.flatnonzero(gb.reshape(-1) != wb.reshape(-1))
    if not bad.size:
        return None
    i = tuple(int(j) for j in np.unravel_index(bad[0], got.shape))  # () for 0-d arrays
    return (
        f"{name}: {len(bad)} of {got.size} values differ, first at {i}: "
        f"got {got[i]!r} (0x{int(gb[i]):08X}), want {want[i]!r} (0x{int(wb[i]):08X})"
    )


def as_outputs(result) -> tuple:
    """A kernel's result as a tuple of arrays (single outputs become 1-tuples)."""
    return tuple(result) if isinstance(result, tuple) else (result,)


def compare_outputs(got, want) -> str | None:
    """Compare two kernel results (single array or tuple of arrays) bit for bit."""
    got, want = as_outputs(got), as_outputs(want)
    if len(got) != len(want):
        return f"got {len(got)} outputs, want {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if not isinstance(g, np.ndarray):
            return f"output {k} is a {type(g).__name__}, want a numpy array"
        msg = describe_difference(g, w, f"output {k}")
        if msg:
            return msg
    return None


# ------------------------------------------------------------------ values


def wide(rng, shape, spread: int = 6, zeros: float = 0.05) -> np.ndarray:
    """Normal values scaled by random powers of two in [2^-spread, 2^spread], some +-0.0."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
    x = x.astype(F32)
    z = rng.random(shape) < zeros
    x[z] = np.where(rng.random(int(z.sum())) < 0.5, F32(0.0), F32(-0.0))
    return x


def tiny(rng, shape) -> np.ndarray:
    """Values near 2^-70: their products are subnormal (lost under flush-to-zero)."""
    return (rng.standard_normal(shape) * 2.0**-70).astype(F32)


def sprinkle(rng, x: np.ndarray, count: int) -> np.ndarray:
    """Return a copy of x with `count` random entries replaced by special values."""
    x = x.copy()
    flat = x.reshape(-1)
    if flat.size:
        where = rng.integers(0, flat.size, count)
        flat[where] = rng.choice(SPECIALS, count)
    return x


def any_bits(rng, shape) -> np.ndarray:
    """Uniformly random bit patterns: every float32 class, NaN payloads included."""
    return rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32).view(F32)


def variants(rng, shape, specials: int = 2):
    """(label, array) triples of the three value families used for most ops."""
    yield "wide", wide(rng, shape)
    yield "tiny", tiny(rng, shape)
    yield "special", sprinkle(rng, wide(rng, shape), specials)


# ------------------------------------------------------------------- cases


def tie_products(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n pairs (a, b) of float32 whose exact product has 25 significant bits, the last one set: a float32 tie.

    (2^12 + i) * (2^12 + j) with odd i, j is odd; those below 2^25 have 25 bits. Random exponents and signs.
    """
    out_a: list[float] = []
    out_b: list[float] = []
    while len(out_a) < n:
        i = rng.integers(0, 2**11, 4 * n) * 2 + 1
        j = rng.integers(0, 2**11, 4 * n) * 2 + 1
        keep = (2**12 + i) * (2**12 + j) < 2**25
        ea = rng.integers(-60, 60, int(keep.sum()))
        eb = rng.integers(-60, 60, int(keep.sum()))
        out_a += list(np.ldexp((2**12 + i[keep]).astype(np.float64), ea - 12))
        out_b += list(np.ldexp((2**12 + j[keep]).astype(np.float64), eb - 12))
    sign = rng.choice([-1.0, 1.0], n)
    return (np.array(out_a[:n]) * sign).astype(F32), np.array(out_b[:n]).astype(F32)


def near_tie_products(op, rng, z: int) -> tuple[np.ndarray, np.ndarray]:
    """Batched (z, 1, 2) x (z, 2, 1) operands of `op` whose fold is fma(t_a, t_b, tiny) after fma(1, tiny, 0).

    The second step's exact value is a float32 tie moved off the midpoint by an addend far below float64's
    precision: a fold that rounds the product and the sum apart (version 1), or that adds in float64 and
    rounds again, lands elsewhere than one rounding does (version 2). Tells the versions and a wrong fma apart.
    """
    ta, tb = tie_products(rng, z)
    tiny = rng.choice(np.array([2.0**-100, -(2.0**-100), 1e-45, -1e-45], F32), z)
    a = np.stack([np.ones(z, F32), ta], axis=1)[:, None, :]  # (z, 1, 2): a[z, 0, k]
    b = np.stack([tiny, tb], axis=1)[:, :, None]  # (z, 2, 1): b[z, k, 0]
    if op == "matmul_nt":
        b = np.ascontiguousarray(b.transpose(0, 2, 1))  # (z, 1, 2)
    if op == "matmul_tn":
        a = np.ascontiguousarray(a.transpose(0, 2, 1))  # (z, 2, 1)
    return a, b


def _matmul_cases(op, rng, small):
    sizes = [(1, 1, 1), (3, 7, 17), (17, 31, 3), (2, 0, 3), (7, 1, 13)]
    # (70, 5, 66) spans 2 x 2 output tiles of 64 (triton); small shapes keep the interpreter quick.
    sizes += [(5, 33, 9), (70, 5, 66)] if small else [(31, 64, 97), (97, 130, 31), (130, 17, 64), (3, 257, 5)]
    batched = [(2, 3, 5, 7)] if small else [(3, 17, 31, 7), (2, 64, 9, 130)]
    for shape in [(None,) + s for s in sizes] + batched:
        bh, m, k, n = shape
        lead = () if bh is None else (bh,)
        a_shape = lead + {"matmul": (m, k), "matmul_nt": (m, k), "matmul_tn": (k, m)}[op]
        b_shape = lead + {"matmul": (k, n), "matmul_nt": (n, k), "matmul_tn": (k, n)}[op]
        for label, a in variants(rng, a_shape):
            b = wide(rng, b_shape) if label != "tiny" else tiny(rng, b_shape)
            yield f"{label} {a_shape}x{b_shape}", (a, b)
    zeros = np.full((3, 4), -0.0, dtype=F32)  # all products -0.0: the fold starts from +0.0
    b_shape = {"matmul": (4, 3), "matmul_nt": (3, 4), "matmul_tn": (3, 2)}[op]
    yield "negative zeros", (zeros, np.ones(b_shape, dtype=F32))
    yield "near ties", near_tie_products(op, rng, 64 if small else 512)


def _rows_cases(op, rng, small):
    sizes = [(1, 1), (3, 7), (17, 31), (7, 1), (1, 130), (5, 64)]
    sizes += [(4, 97), (40, 130)] if small else [(31, 64), (97, 130), (130, 97), (3, 1500), (1500, 3)]
    if op != "max_rows":
        sizes += [(5, 0), (0, 5)]  # empty sums are +0.0
    for shape in sizes:
        for label, x in variants(rng, shape, specials=max(1, shape[0] // 3)):
            yield f"{label} {shape}", (x,)
    yield "signed zeros", (np.array([[-0.0, 0.0, -0.0], [0.0, -0.0, -0.0], [-0.0, -0.0, -0.0]], dtype=F32),)
    yield "infinities", (np.array([[np.inf, -np.inf, 1.0], [-np.inf, -np.inf, 2.0], [np.nan, 1.0, 3.0]], dtype=F32),)


def _elementwise_cases(op, rng, small):
    n = 1100 if small else 4099  # more than one 1024-element block either way
    yield "specials", (SPECIALS.copy(),)
    yield "any bits", (any_bits(rng, (n,)),)
    yield "any bits 2-d", (any_bits(rng, (3, 7)),)
    yield "one", (np.array([0.5], dtype=F32),)
    if op == "log":
        yield "positive", ((np.exp2(rng.uniform(-149, 128, n))).astype(F32),)
        yield "near one", ((1.0 + rng.uniform(-0.3, 0.45, n)).astype(F32),)
    else:
        yield "range", (rng.uniform(-110, 95, n).astype(F32),)
        yield (
            "thresholds",
            (
                np.nextafter(
                    np.repeat(np.array([89, -104, -87.33655, 88.72284], F32), 3),
                    np.tile(np.array([-np.inf, 0, np.inf], F32), 4),
                ).astype(F32),
            ),
        )
        yield "small", (wide(rng, (n,), spread=3),)


def _silu_backward_cases(op, rng, small):
    for label, (x,) in _elementwise_cases("silu", rng, small):
        yield label, (x, wide(rng, x.shape))


def _scores(rng, bh, t, small):
    s = wide(rng, (bh, t, t), spread=3)
    yield f"wide {(bh, t, t)}", s
    yield f"ties {(bh, t, t)}", np.round(s).astype(F32)
    yield f"special {(bh, t, t)}", sprinkle(rng, s, 1 + t // 4)
    big = s * F32(1e3)
    big[..., 0] = -np.inf  # a masked-looking first key; rows that only see it go NaN
    yield f"large and -inf {(bh, t, t)}", big


def _softmax_shapes(small):
    shapes = [(1, 1), (2, 3), (3, 7), (1, 17)]
    return shapes + ([(1, 33), (1, 70)] if small else [(2, 31), (1, 64), (1, 97), (1, 130)])


def _softmax_cases(op, rng, small):
    from kernels import reference as R

    for bh, t in _softmax_shapes(small):
        for label, s in _scores(rng, bh, t, small):
            if op == "softmax_causal":
                yield label, (s,)
            else:
                p = R.softmax_causal(s) if "special" not in label else s
                yield label, (p, wide(rng, s.shape, spread=3))


def _attention_cases(op, rng, small):
    from kernels import reference as R

    shapes = [(1, 1, 1), (2, 3, 7), (1, 17, 3)]
    shapes += [(1, 9, 16)] if small else [(2, 31, 16), (1, 64, 8), (1, 97, 5), (1, 130, 17)]
    for shape in shapes:
        for label in ("wide", "tiny", "special"):
            make = {"wide": lambda s=shape: wide(rng, s, spread=2), "tiny": lambda s=shape: tiny(rng, s),
                    "special": lambda s=shape: sprinkle(rng, wide(rng, s, spread=2), 1)}[label]  # fmt: skip
            q, k, v = make(), make(), make()
            if op == "attention":
                yield f"{label} {shape}", (q, k, v)
            else:
                _, p = R.attention(q, k, v)
                yield f"{label} {shape}", (q, k, v, p, make())


def _rmsnorm_inputs(rng, shape):
    yield "wide", wide(rng, shape), 1e-5
    yield "tiny", tiny(rng, shape), 1e-6
    yield "special", sprinkle(rng, wide(rng, shape), 1), 1e-5
    big = wide(rng, shape) * F32(2.0**60)  # x * x overflows: rstd = 0
    big[0] = 0.0  # a zero row: rstd = 1 / sqrt(eps)
    yield "huge and zero rows", big, 0.0 if shape[1] == 1 else 1e-5


def _rmsnorm_cases(op, rng, small):
    from kernels import reference as R

    shapes = [(1, 1), (3, 7), (17, 31), (5, 64)]
    shapes += [(3, 97), (33, 130)] if small else [(31, 64), (97, 130), (2, 1500)]
    for shape in shapes:
        for label, x, eps in _rmsnorm_inputs(rng, shape):
            w = wide(rng, (shape[1],), spread=1)
            if op == "rmsnorm":
                yield f"{label} {shape} eps={eps}", (x, w, eps)
            else:
                _, rstd = R.rmsnorm(x, w, eps)
                yield f"{label} {shape}", (x, w, rstd, wide(rng, shape))


def _cross_entropy_cases(op, rng, small):
    shapes = [(1, 1), (3, 7), (17, 31), (5, 64)]
    shapes += [(4, 97), (33, 130)] if small else [(31, 64), (97, 130), (4, 1500)]
    for n, v in shapes:
        t = rng.integers(0, v, n)
        logits = {"wide": wide(rng, (n, v), spread=4), "ties": np.round(wide(rng, (n, v), spread=1)).astype(F32)}
        huge = wide(rng, (n, v), spread=2) * F32(1e30)
        if v > 1:
            huge[np.arange(n), (t + 1) % v] = -np.inf  # a -inf logit that is not a target
        logits["huge and -inf"] = huge
        logits["special"] = sprinkle(rng, wide(rng, (n, v), spread=4), 1)
        for label, l in logits.items():
            if op == "cross_entropy":
                yield f"{label} {(n, v)}", (l, t)
            else:
                yield f"{label} {(n, v)}", (l, t, [1.0, 0.37, -2.5][n % 3])


def _embedding_cases(op, rng, small):
    sizes = [(1, 1, 1), (7, 3, 17), (31, 17, 97), (5, 8, 0)]
    sizes += [(3, 130, 40)] if small else [(130, 64, 300), (3, 130, 1000)]
    for v, c, n in sizes:
        idx = rng.integers(0, v, n)  # int64, many duplicates
        if op == "embedding":
            yield f"{(v, c)} x {n}", (sprinkle(rng, wide(rng, (v, c)), 2), idx)
        else:
            yield f"{(v, c)} x {n}", (idx, sprinkle(rng, wide(rng, (n, c)), 2), v)
            yield f"tiny {(v, c)} x {n}", (idx, tiny(rng, (n, c)) * F32(2.0**-60), v)


ADAMW_SETTINGS = [(1e-3, 0.9, 0.999, 1e-8, 0.1), (3e-4, 0.8, 0.95, 1e-6, 0.0), (0.5, 0.0, 0.0, 0.0, 1.0)]


def _adamw_cases(op, rng, small):
    shapes = [(1,), (7,), (3, 17)] + ([(1100,)] if small else [(97, 130)])
    for i, shape in enumerate(shapes):
        for step in (1, 2, 10, 1000, 123457):
            settings = ADAMW_SETTINGS[(i + step) % len(ADAMW_SETTINGS)]
            p = wide(rng, shape)
            g = sprinkle(rng, wide(rng, shape, spread=10), 1) if step == 10 else wide(rng, shape, spread=10)
            m = wide(rng, shape, spread=10) * F32(0.1)
            v = np.abs(wide(rng, shape, spread=10)) * F32(0.01)
            if step == 2:
                g, m, v = tiny(rng, shape), tiny(rng, shape), np.abs(tiny(rng, shape)) ** 2
            yield f"{shape} step={step} {settings}", (p, g, m, v, step) + settings


_BUILDERS = {
    "matmul": _matmul_cases, "matmul_nt": _matmul_cases, "matmul_tn": _matmul_cases,
    "sum_rows": _rows_cases, "sum_cols": _rows_cases, "max_rows": _rows_cases,
    "exp": _elementwise_cases, "log": _elementwise_cases, "silu": _elementwise_cases,
    "silu_backward": _silu_backward_cases,
    "softmax_causal": _softmax_cases, "softmax_causal_backward": _softmax_cases,
    "attention": _attention_cases, "attention_backward": _attention_cases,
    "rmsnorm": _rmsnorm_cases, "rmsnorm_backward": _rmsnorm_cases,
    "cross_entropy": _cross_entropy_cases, "cross_entropy_backward": _cross_entropy_cases,
    "embedding": _embedding_cases, "embedding_backward": _embedding_cases,
    "adamw": _adamw_cases,
}  # fmt: skip


def build_cases(op: str, seed: int, small: bool = False) -> list[tuple[str, tuple]]:
    """The (label, args) cases of `op`, from a generator seeded by (seed, op)."""
    rng = np.random.default_rng([seed, OPS.index(op)])
    return list(_BUILDERS[op](op, rng, small))


def check_backend(backend, reference, op: str, seed: int, small: bool = False) -> list[str]:
    """Run every case of `op` on both modules; return one line per case that differs.

    A backend that writes into one of its inputs is reported too.
    """
    failures = []
    for label, args in build_cases(op, seed, small):
        want = getattr(reference, op)(*args)
        before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        got = getattr(backend, op)(*args)
        msg = compare_outputs(got, want)
        for k, (a, b) in enumerate(zip(args, before)):
            if isinstance(a, np.ndarray) and (a.dtype != b.dtype or a.tobytes() != b.tobytes()):
                msg = (msg + "; " if msg else "") + f"argument {k} was modified"
        if msg:
            failures.append(f"{op} [{label}]: {msg}")
    return failures
