"""On cpu the lab mode multiplies large float32 tensors on every thread (kernels/cpu_lab.py multiply,
scale_in_place) where numpy's product runs on one: the same rounded products, so the reference backend's
bits (which NaN pattern is left open by docs/arithmetic.md section 1, and digests write every NaN alike)."""

from __future__ import annotations

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


@pytest.mark.parametrize(
    "op,kernel,fn", [("aten.mul.Tensor", "multiply", np.multiply), ("aten.add.Tensor", "add", np.add)]
)
@pytest.mark.parametrize("n", [cpu_lab.PARALLEL_MIN, cpu_lab.PARALLEL_MIN - 1, 3 * cpu_lab.PARALLEL_MIN + 5])
def test_mul_and_add_on_every_thread_are_numpys(monkeypatch, n, op, kernel, fn):
    rng = np.random.default_rng(n)
    a, b = _operand(rng, n).reshape(-1, 16 if n % 16 == 0 else 1), _operand(rng, n)
    b = b.reshape(a.shape)
    calls = _counting(monkeypatch, kernel)
    cpu = OpContext(kernels.get_backend("cpu", 2))
    got = ELEMENTWISE[op](cpu, op, {"self": torch.from_numpy(a), "other": torch.from_numpy(b)})
    assert len(calls) == (1 if n >= cpu_lab.PARALLEL_MIN else 0)  # the threaded kernel from PARALLEL_MIN on
    with np.errstate(all="ignore"):
        want = fn(a, b)
    assert _same_bits(got.numpy(), want)
    reference = OpContext(kernels.get_backend("reference", 2))
    again = ELEMENTWISE[op](reference, op, {"self": torch.from_numpy(a), "other": torch.from_numpy(b)})
    assert _same_bits(got.numpy(), again.numpy())


def test_a_broadcast_or_strided_product_stays_numpys(monkeypatch):
    rng = np.random.default_rng(1)
    a = _operand(rng, 1 << 20).reshape(1024, 1024)
    calls = _counting(monkeypatch, "multiply")
    cpu = OpContext(kernels.get_backend("cpu", 2))
    row = torch.from_numpy(_operand(rng, 1024))
    for other in (row, torch.from_numpy(a).t()):  # a broadcast row; a transposed (strided) view
        got = ELEMENTWISE["aten.mul.Tensor"](cpu, "aten.mul.Tensor", {"self": torch.from_numpy(a), "other": other})
        with np.errstate(all="ignore"):
            assert _same_bits(got.numpy(), a * other.numpy())
    assert calls == []


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
    ((2, 3, 128, 64), (128, 1)),  # four dimensions
    ((1001, 70), (1001, 1)),  # one (i, j): its rows cut into tasks, the last one short
    ((3, 5, 370, 13), (370, 13)),  # fifteen (i, j), a task each
]


@pytest.mark.parametrize("op,fn", [("aten.mul.Tensor", np.multiply), ("aten.add.Tensor", np.add)])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_broadcast_and_strided_operands_on_every_thread_are_numpys(monkeypatch, op, fn, shapes):
    """cpu_lab.broadcast_binary (kernels/cpu_elementwise.py binary_4d): numpy's broadcasting, any strides
    (a rope's every-other-element view), one rounding per element; the reference backend's bits."""
    rng = np.random.default_rng(len(str(shapes)))
    a, b = (_operand(rng, int(np.prod(s))).reshape(s) for s in shapes)
    calls = _counting(monkeypatch, "broadcast_binary")
    cpu = OpContext(kernels.get_backend("cpu", 2))
    reference = OpContext(kernels.get_backend("reference", 2))
    strided = np.repeat(a, 2, axis=-1)[..., ::2]  # the same values through a view with a step
    for left in (a, strided):
        args = {"self": torch.from_numpy(left) if left is a else torch.from_numpy(np.repeat(a, 2, axis=-1))[..., ::2]}
        args["other"] = torch.from_numpy(b)
        got = ELEMENTWISE[op](cpu, op, dict(args)).numpy()
        with np.errstate(all="ignore"):
            want = fn(left, b)
        assert got.shape == want.shape and _same_bits(got, want)
        assert _same_bits(got, ELEMENTWISE[op](reference, op, dict(args)).numpy())
    assert len(calls) == 2
    small = {"self": torch.from_numpy(a.reshape(-1)[:100].copy()), "other": torch.tensor(F32(2.0))}
    ELEMENTWISE[op](cpu, op, small)
    assert len(calls) == 3 and cpu_lab.broadcast_binary(small["self"].numpy(), np.float32(2.0), True) is None


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
