"""On cpu the lab mode multiplies large float32 tensors on every thread (kernels/cpu_lab.py multiply,
scale_in_place) where numpy's product runs on one: the same rounded products, so the reference backend's
bits (which NaN pattern is left open by docs/arithmetic.md section 1, and digests write every NaN alike)."""

from __future__ import annotations

import numba
import numpy as np
import pytest
import torch

import kernels
from kernels import cpu_lab
from p2paudit.lab.context import OpContext
from p2paudit.lab.ops_elementwise import ELEMENTWISE
from p2paudit.lab.ops_optim import OPTIM
from p2paudit.lab.ops_reduce import REDUCTIONS as REDUCE

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf x 0 and overflow, on purpose
F32 = np.float32
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 3.4e38, -3.4e38, 1.0, -1.0], F32)


def _operand(rng: np.random.Generator, n: int) -> np.ndarray:
    """Normal values of every scale, with the special values strewn through (so products overflow,
    underflow to subnormals and zeros, and meet inf x 0)."""
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-140, 128, n))).astype(F32)
    where = rng.integers(0, n, n // 50)
    x[where] = SPECIAL[rng.integers(0, SPECIAL.size, where.size)]
    return x


def _same_bits(got: np.ndarray, want: np.ndarray) -> bool:
    both_nan = np.isnan(got) & np.isnan(want)
    return bool(np.all(both_nan | (got.view(np.uint32) == want.view(np.uint32))))


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(cpu_lab, name)

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(cpu_lab, name, counted)
    return calls


OPS = [
    ("aten.mul.Tensor", np.multiply),
    ("aten.add.Tensor", np.add),
    ("aten.sub.Tensor", np.subtract),
    ("aten.div.Tensor", np.divide),
]


def _kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Calls of the threaded kernel (kernels/cpu_elementwise.binary_rows) made through cpu_lab.binary."""
    calls: list[int] = []
    real = cpu_lab.binary_rows

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(cpu_lab, "binary_rows", counted)
    return calls


@pytest.mark.parametrize("op,fn", OPS)
@pytest.mark.parametrize("n", [cpu_lab.PARALLEL_MIN, cpu_lab.PARALLEL_MIN - 1, 3 * cpu_lab.PARALLEL_MIN + 5])
def test_arithmetic_on_every_thread_is_numpys(monkeypatch, n, op, fn):
    rng = np.random.default_rng(n)
    a, b = _operand(rng, n).reshape(-1, 16 if n % 16 == 0 else 1), _operand(rng, n)
    b = b.reshape(a.shape)
    calls = _kernel_calls(monkeypatch)
    cpu = OpContext(kernels.get_backend("cpu", 2))
    got = ELEMENTWISE[op](cpu, op, {"self": torch.from_numpy(a), "other": torch.from_numpy(b)})
    assert len(calls) == (1 if n >= cpu_lab.PARALLEL_MIN else 0)  # the threaded kernel from PARALLEL_MIN on
    with np.errstate(all="ignore"):
        want = fn(a, b)
    assert _same_bits(got.numpy(), want)
    reference = OpContext(kernels.get_backend("reference", 2))
    again = ELEMENTWISE[op](reference, op, {"self": torch.from_numpy(a), "other": torch.from_numpy(b)})
    assert _same_bits(got.numpy(), again.numpy())


@pytest.mark.parametrize("op,fn", OPS)
def test_a_scalar_operand_on_every_thread_is_numpys(monkeypatch, op, fn):
    """mul.Scalar and its kin: the Python number rounded to float32 once, then the threaded kernel (a stride
    0 operand), either side; numpy's bits."""
    rng = np.random.default_rng(3)
    a = _operand(rng, 3 * cpu_lab.PARALLEL_MIN).reshape(3, -1)
    calls = _kernel_calls(monkeypatch)
    cpu = OpContext(kernels.get_backend("cpu", 2))
    scalar_op = op.replace(".Tensor", ".Scalar")
    for c in (0.1, -3.0, 1e-40, float("inf")):
        got = ELEMENTWISE[scalar_op](cpu, scalar_op, {"self": torch.from_numpy(a), "other": c}).numpy()
        with np.errstate(all="ignore"):
            assert _same_bits(got, fn(a, F32(c)))
        out = cpu_lab.binary(F32(c), a, cpu_lab.MULTIPLY)  # the scalar first
        assert out is not None and _same_bits(out, a * F32(c))
    assert len(calls) == 8


def test_foreach_mul_scales_in_place_on_every_thread(monkeypatch):
    rng = np.random.default_rng(2)
    big, small = _operand(rng, cpu_lab.PARALLEL_MIN + 3), _operand(rng, 100)
    c = F32(0.3711)
    with np.errstate(all="ignore"):
        want = [big * c, small * c]
    tensors = [torch.from_numpy(big.copy()), torch.from_numpy(small.copy())]
    calls = _counting(monkeypatch, "scale_in_place")
    cpu = OpContext(kernels.get_backend("cpu", 2))
    OPTIM["aten._foreach_mul_.Tensor"](cpu, "aten._foreach_mul_.Tensor", {"self": tensors, "other": torch.tensor(c)})
    assert len(calls) == 2  # asked for both; the small one is left to numpy (False)
    for t, w in zip(tensors, want):
        assert _same_bits(t.numpy(), w)
    assert not cpu_lab.scale_in_place(small.copy(), c) and cpu_lab.scale_in_place(big.copy(), c)


@pytest.mark.parametrize("reduction", [1, 2])  # mean, sum
def test_nll_loss_backward_writes_its_one_hot_rows_on_every_thread(monkeypatch, reduction):
    """On cpu the gradient's rows are filled by one threaded kernel: the reference's array bit for bit,
    ignored rows all +0.0, the one value at each kept target (and -0.0 nowhere else)."""
    from p2paudit.lab.ops_nn import NN

    rng = np.random.default_rng(reduction)
    n, v = 37, 1000
    logp = torch.from_numpy(rng.standard_normal((n, v)).astype(F32))
    target = torch.from_numpy(rng.integers(0, v, n).astype(np.int64))
    target[[3, 20]] = -100  # ignored
    target[5] = v - 1
    args = {
        "grad_output": torch.tensor(0.75), "self": logp, "target": target, "weight": None,
        "reduction": reduction, "ignore_index": -100, "total_weight": torch.tensor(F32(n - 2)),
    }  # fmt: skip
    calls = _counting(monkeypatch, "one_hot")
    got = NN["aten.nll_loss_backward.default"](OpContext(kernels.get_backend("cpu", 2)), "x", dict(args)).numpy()
    want = NN["aten.nll_loss_backward.default"](OpContext(kernels.get_backend("reference", 2)), "x", dict(args))
    assert len(calls) == 1
    assert got.tobytes() == want.numpy().tobytes()
    value = F32(-0.75) / F32(n - 2) if reduction == 1 else F32(-0.75)
    expected = np.zeros((n, v), F32)
    kept = np.flatnonzero(target.numpy() != -100)
    expected[kept, target.numpy()[kept]] = value
    assert got.tobytes() == expected.tobytes()
    with pytest.raises(ValueError, match="do not index the rows"):
        cpu_lab.one_hot((n, v), np.full(n, v, np.int64), F32(1.0))


@pytest.mark.parametrize(
    "n",
    # at, just past and well past a power of two; from FOLD_MIN leaves one fold on the threads, then two
    [cpu_lab.PARALLEL_MIN, cpu_lab.PARALLEL_MIN + 3, 3 * cpu_lab.PARALLEL_MIN - 5, (1 << 19) + 3, 1 << 21],
)
def test_a_large_norm_is_the_reference_tree_on_every_thread(monkeypatch, n):
    """_foreach_norm (clip_grad_norm_) of a large tensor: the squares and the tree's wide levels threaded
    (kernels/cpu_reduce.py square_sum_flat: sixteen leaves of each residue folded at a time), the reference
    backend's psum of the squares bit for bit; values of every scale; an inf and a NaN carried."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-70, 40, n))).astype(F32).reshape(-1, 1 if n % 2 else 2)
    reference = OpContext(kernels.get_backend("reference", 2))
    cpu = OpContext(kernels.get_backend("cpu", 2))
    calls = _counting(monkeypatch, "square_sum")
    name = "aten._foreach_norm.Scalar"
    for special in (None, np.inf, np.nan):
        if special is not None:
            x.reshape(-1)[n // 3] = special
        small = x.reshape(-1)[:1000].copy()
        args = {"self": [torch.from_numpy(x), torch.from_numpy(small)], "ord": 2}
        got = [t.numpy() for t in REDUCE[name](cpu, name, dict(args))]
        want = [t.numpy() for t in REDUCE[name](reference, name, dict(args))]
        assert [g.tobytes() for g in got] == [w.tobytes() for w in want] and got[0].shape == ()
        with np.errstate(all="ignore"):
            exact = np.sqrt(np.sum(x.astype(np.float64) ** 2))
        if special is None:  # and it is the 2-norm: float32 rounding of a sum of n terms, far below 1e-5
            assert abs(float(got[0]) - exact) <= 1e-5 * exact
    assert len(calls) == 6  # both tensors asked each time; the small one left to the rows' kernel (None)
    assert cpu_lab.square_sum(x.reshape(-1)[:1000].copy()) is None


BROADCASTS = [
    ((1, 1024, 768), (768,)),  # a norm's weight
    ((1, 1024, 768), (1, 1024, 1)),  # a per-row scale
    ((256,), (300, 256)),  # the larger one second
    ((2, 3, 128, 96), (128, 1)),  # four dimensions
    ((1001, 70), (1001, 1)),  # one (i, j): its rows cut into tasks, the last one short
    ((3, 5, 370, 13), (370, 13)),  # fifteen (i, j), a task each
]


@pytest.mark.parametrize("op,fn", OPS)
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_broadcast_and_strided_operands_on_every_thread_are_numpys(monkeypatch, op, fn, shapes):
    """cpu_lab.binary (kernels/cpu_elementwise.py binary_rows): numpy's broadcasting, any strides (a rope's
    every-other-element view, a transposed one), one rounding per element; the reference backend's bits."""
    rng = np.random.default_rng(len(str(shapes)))
    a, b = (_operand(rng, int(np.prod(s))).reshape(s) for s in shapes)
    cpu = OpContext(kernels.get_backend("cpu", 2))
    reference = OpContext(kernels.get_backend("reference", 2))
    stepped = torch.from_numpy(np.repeat(a, 2, axis=-1))[..., ::2]  # the same values through a view with a step
    for left in (torch.from_numpy(a), stepped):
        args = {"self": left, "other": torch.from_numpy(b)}
        got = ELEMENTWISE[op](cpu, op, dict(args)).numpy()
        with np.errstate(all="ignore"):
            want = fn(a, b)
        assert got.shape == want.shape and _same_bits(got, want)
        assert _same_bits(got, ELEMENTWISE[op](reference, op, dict(args)).numpy())
    calls = _kernel_calls(monkeypatch)
    for x, y in ((a, b), (np.repeat(a, 2, axis=-1)[..., ::2], b), (b, a)):  # the kernel itself: strided in place
        with np.errstate(all="ignore"):
            want = fn(x, y)
        out = cpu_lab.binary(x, y, _KERNEL_OPS[fn])
        assert out is not None and out.shape == want.shape and _same_bits(out, want)
    assert len(calls) == 3
    assert cpu_lab.binary(a.reshape(-1)[:100].copy(), np.float32(2.0), cpu_lab.MULTIPLY) is None  # small
    assert len(calls) == 3


_KERNEL_OPS = {
    np.multiply: cpu_lab.MULTIPLY,
    np.add: cpu_lab.ADD,
    np.subtract: cpu_lab.SUBTRACT,
    np.divide: cpu_lab.DIVIDE,
}


def test_the_broadcast_geometry_merges_axes_and_declines_what_it_cannot_walk():
    """Axes both operands step through as one run are merged (so the inner loop is long); None where the
    kernel would not apply: shapes that do not broadcast (numpy's own error follows), more than four axes
    left, a negative stride, a non-float32 operand, a small result."""
    big = np.ones((4, 256, 256), F32)
    shape, sizes, strides = cpu_lab._broadcast_geometry(big, np.ones(256, F32))
    assert shape == (4, 256, 256) and sizes == [1, 1, 1024, 256] and strides == ([0, 0, 256, 1], [0, 0, 0, 1])
    shape, sizes, strides = cpu_lab._broadcast_geometry(big, big)
    assert sizes == [1, 1, 1, 4 * 256 * 256] and strides == ([0, 0, 0, 1], [0, 0, 0, 1])
    rope = np.ones((4, 256, 8, 16), F32).transpose(0, 2, 1, 3)
    shape, sizes, strides = cpu_lab._broadcast_geometry(rope, np.ones((256, 16), F32))
    assert shape == (4, 8, 256, 16) and sizes == [4, 8, 256, 16]
    assert strides == ([32768, 16, 128, 1], [0, 0, 16, 1])
    assert cpu_lab._broadcast_geometry(big, np.ones(255, F32)) is None
    five = np.ones((2, 3, 4, 5, 6 * 1024), F32)[..., ::2]
    assert cpu_lab._broadcast_geometry(five, np.ones((2, 1, 4, 1, 3 * 1024), F32)) is None
    assert cpu_lab.binary(big[:, ::-1], big, cpu_lab.ADD) is None
    assert cpu_lab.binary(big.astype(np.float64), big, cpu_lab.ADD) is None
    assert cpu_lab.binary(np.ones(10, F32), np.ones((10, 10), F32), cpu_lab.ADD) is None


def test_a_vocabulary_wide_output_is_reused_only_once_nothing_holds_it():
    """cpu_lab keeps the log-softmax's, its backward's and the one-hot's output arrays from step to step
    (_KeptOutputs): one is handed out again only when no array, view or tensor holds it, and then every
    element is written anew."""
    rng = np.random.default_rng(5)
    x, y = (rng.standard_normal((64, 300)).astype(F32) for _ in range(2))
    want_x, want_y = cpu_lab.log_softmax(x).copy(), cpu_lab.log_softmax(y).copy()
    a = cpu_lab.log_softmax(x)
    b = cpu_lab.log_softmax(y)  # `a` holds the kept array: a new one
    assert b.ctypes.data != a.ctypes.data
    assert a.tobytes() == want_x.tobytes() and b.tobytes() == want_y.tobytes()
    del a
    t = torch.from_numpy(b.reshape(-1))  # a tensor of a view of b's array
    b_memory = b.ctypes.data
    del b
    c = cpu_lab.log_softmax(x)  # b's array is held through the tensor: not reused
    assert c.ctypes.data != b_memory and t.numpy().tobytes() == want_y.tobytes()
    del t
    c_memory = c.ctypes.data
    del c
    d = cpu_lab.log_softmax(y)  # nothing holds c's array: the same memory, every element rewritten
    assert d.ctypes.data == c_memory and d.tobytes() == want_y.tobytes()
    g = cpu_lab.log_softmax_backward(d, x)
    e = cpu_lab.one_hot((64, 300), np.arange(64, dtype=np.int64), F32(-0.5))
    assert len({d.ctypes.data, g.ctypes.data, e.ctypes.data}) == 3  # one kept array per op
    g_memory = g.ctypes.data
    del g
    assert cpu_lab.log_softmax_backward(d, y).ctypes.data == g_memory


def _random_view(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """An array of `shape` whose values are random and whose layout is one of: C order, a permuted
    (transposed) base, every other element of a wider base, a broadcast of a smaller one."""
    kind = rng.integers(0, 4)
    if kind == 1 and len(shape) > 1:
        order = rng.permutation(len(shape))
        base = _operand(rng, int(np.prod(shape))).reshape([shape[i] for i in order])
        return base.transpose(np.argsort(order))
    if kind == 2:
        return _operand(rng, 2 * int(np.prod(shape))).reshape(*shape[:-1], 2 * shape[-1])[..., ::2]
    if kind == 3:
        small = _operand(rng, int(np.prod(shape))).reshape(shape)[
            tuple(slice(0, 1) if rng.random() < 0.5 else slice(None) for _ in shape)
        ]
        # a writeable broadcast, as torch's expand gives (numpy's broadcast_to is read-only: another compile)
        return np.lib.stride_tricks.as_strided(
            small, shape, [0 if m == 1 else s for m, s in zip(small.shape, small.strides)]
        )
    return _operand(rng, int(np.prod(shape))).reshape(shape)


@pytest.mark.parametrize("seed", range(24))
def test_random_layouts_and_broadcasts_are_numpys(seed):
    """cpu_lab.binary on random shapes of one to five axes, each operand in a random layout and either one
    broadcast over the other's axes: numpy's bits for every op, or None where numpy alone applies."""
    rng = np.random.default_rng(seed)
    nd = int(rng.integers(1, 6))
    shape = [int(rng.integers(1, 9)) for _ in range(nd)]
    long = int(rng.integers(0, nd))
    shape[long] = int(rng.integers(1 << 16, 1 << 17)) // (int(np.prod(shape)) // shape[long]) + 1  # >= 64K
    x = _random_view(rng, tuple(shape))
    y_shape = tuple(n if rng.random() < 0.6 else 1 for n in shape)[int(rng.integers(0, nd)) :]
    y = _random_view(rng, y_shape) if y_shape else np.asarray(_operand(rng, 1)[0])
    for fn, op in _KERNEL_OPS.items():
        for a, b in ((x, y), (y, x)):
            out = cpu_lab.binary(a, b, op)
            with np.errstate(all="ignore"):
                want = fn(a, b)
            assert want.size >= cpu_lab.PARALLEL_MIN
            if out is None:  # only where more than four axes are left after merging
                assert nd == 5 and cpu_lab._broadcast_geometry(np.asarray(a), np.asarray(b)) is None
            else:
                assert out.shape == want.shape and _same_bits(out, want)


@pytest.mark.parametrize("fn", list(_KERNEL_OPS), ids=lambda f: f.__name__)
def test_a_ropes_interleaved_halves_times_its_table_are_numpys(fn):
    """RoPE's x[..., ::2] and x[..., 1::2] of a (B, H, T, D) view of a fused qkv product, times a (T, D/2)
    table: the stride-2 case of binary_rows (two vectors loaded, every other lane kept), the half that ends
    at the buffer's last element included; numpy's bits, the table on either side."""
    rng = np.random.default_rng(7)
    b, t, h, d = 2, 256, 8, 32
    qkv = _operand(rng, b * t * 3 * h * d).reshape(b, t, 3 * h * d)
    v = qkv[..., 2 * h * d :].reshape(b, t, h, d).transpose(0, 2, 1, 3)  # ends at qkv's last element
    table = _operand(rng, t * d // 2).reshape(t, d // 2)
    for half in (v[..., ::2], v[..., 1::2]):
        assert half.strides[-1] == 8
        for x, y in ((half, table), (table, half)):
            out = cpu_lab.binary(x, y, _KERNEL_OPS[fn])
            with np.errstate(all="ignore"):
                want = fn(x, y)
            assert out is not None and out.shape == want.shape and _same_bits(out, want)


def test_binary_keeps_one_plan_per_layout_and_thread_count(monkeypatch):
    """cpu_lab.binary plans a layout (shapes, strides, threads) once: the geometry is not worked out again for
    the next call of that layout, a new layout or thread count gets its own plan, and the bits are the same."""
    monkeypatch.setattr(cpu_lab, "_PLANS", {})
    planned: list[int] = []
    real = cpu_lab._broadcast_geometry

    def counted(x, y):
        planned.append(1)
        return real(x, y)

    monkeypatch.setattr(cpu_lab, "_broadcast_geometry", counted)
    rng = np.random.default_rng(3)
    a, w = _operand(rng, 4 * 256 * 256).reshape(4, 256, 256), _operand(rng, 256)
    first = cpu_lab.binary(a, w, cpu_lab.MULTIPLY)
    again = cpu_lab.binary(a.copy(), w.copy(), cpu_lab.MULTIPLY)
    assert len(planned) == 1 and first is not None and again is not None
    assert first.view(np.uint32).tobytes() == again.view(np.uint32).tobytes()
    assert cpu_lab.binary(a[:, ::2], w, cpu_lab.MULTIPLY) is not None and len(planned) == 2  # another layout
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one = cpu_lab.binary(a, w, cpu_lab.MULTIPLY)  # one thread: its own tasks
    finally:
        numba.set_num_threads(threads)
    assert one is not None and one.view(np.uint32).tobytes() == first.view(np.uint32).tobytes()
    assert len(planned) == (3 if threads > 1 else 2)
    planned.clear()
    small = np.ones(10, F32)
    assert cpu_lab.binary(small, small, cpu_lab.ADD) is None and cpu_lab.binary(small, small, cpu_lab.ADD) is None
    assert len(planned) == 1  # a refusal is planned once too


def test_a_broadcast_value_divided_fills_each_row_on_every_thread(monkeypatch):
    """A mean's backward: g (B, T, 1) expanded over C (stride 0) divided by a count. Every row is one value
    written C times (the both-strides-zero case of binary_rows); numpy's bits, on the threaded kernel."""
    rng = np.random.default_rng(11)
    g = _operand(rng, 4 * 256).reshape(4, 256, 1)
    wide = np.broadcast_to(g, (4, 256, 256))
    calls = _kernel_calls(monkeypatch)
    cpu = OpContext(kernels.get_backend("cpu", 2))
    expanded = torch.from_numpy(g).expand(4, 256, 256)  # wide's layout (torch.from_numpy warns on a read-only view)
    got = ELEMENTWISE["aten.div.Scalar"](cpu, "aten.div.Scalar", {"self": expanded, "other": 256})
    with np.errstate(all="ignore"):
        want = wide / F32(256)
    assert len(calls) == 1 and _same_bits(got.numpy(), want)


def test_neg_and_integer_powers_run_on_every_thread_with_numpys_bits(monkeypatch):
    """neg flips the sign bit (of zeros and NaNs too, as numpy's negative) and x ** e for e = 2..8 is the left
    fold x * x * ... * x: on the threaded kernel for a large x, read in place where it is strided (RoPE's
    x[..., 1::2]); a small x goes to numpy; the same bits either way."""
    rng = np.random.default_rng(12)
    base = _operand(rng, 4 * 8 * 256 * 32).reshape(4, 8, 256, 32)
    base.reshape(-1)[:4] = [0.0, -0.0, np.nan, -np.nan]
    cpu = OpContext(kernels.get_backend("cpu", 2))
    calls = _kernel_calls(monkeypatch)
    for x in (base, base[..., 1::2], base[:1, :1, :2, :3]):
        got = ELEMENTWISE["aten.neg.default"](cpu, "aten.neg.default", {"self": torch.from_numpy(x)}).numpy()
        assert got.view(np.uint32).tobytes() == np.negative(x).view(np.uint32).tobytes()  # NaN signs too
        for e in range(2, 9):
            a = {"self": torch.from_numpy(x), "exponent": e}
            got = ELEMENTWISE["aten.pow.Tensor_Scalar"](cpu, "aten.pow.Tensor_Scalar", a).numpy()
            with np.errstate(all="ignore"):
                want = x * x
                for _ in range(e - 2):
                    want = want * x
            assert _same_bits(got, want)
    assert len(calls) == 2 * (1 + sum(e - 1 for e in range(2, 9)))  # the two large ones threaded, not the small
