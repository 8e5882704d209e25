"""p2paudit/lab/threaded.py: large float32 + - * / computed as slices on a pool give numpy's whole-array bits,
for every broadcast the entries meet, and leave everything else to the caller."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import kernels
from p2paudit.lab import threaded
from p2paudit.lab.context import OpContext
from p2paudit.lab.ops_elementwise import ELEMENTWISE

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
F32 = np.float32
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, 3.4e38, -3.4e38], F32)


def _values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-130, 120, shape))).astype(F32)
    flat = x.reshape(-1)
    where = rng.integers(0, flat.size, max(1, flat.size // 40))
    flat[where] = SPECIAL[rng.integers(0, SPECIAL.size, where.size)]
    return x


SHAPES = [
    ((1024, 768), (768,)),  # a norm's weight
    ((1024, 768), (1024, 1)),  # a per-row scale
    ((1, 512, 384), (1, 512, 384)),  # a leading axis of 1: sliced along the next
    ((4, 8, 256, 32), (256, 32)),  # rope's tables
    ((3, 200_000), ()),  # a float32 scalar
]


@pytest.mark.parametrize("fn", threaded.UFUNCS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_slices_on_the_pool_are_numpys_whole_array(monkeypatch, fn, shapes):
    rng = np.random.default_rng(len(str(shapes)))
    x = _values(rng, shapes[0])
    y = _values(rng, shapes[1]) if shapes[1] else F32(-3.5)
    seen: set[str] = set()
    real = threaded.ThreadPoolExecutor.submit

    def spy(self, fn_, *args):  # noqa: ANN001, ANN202
        return real(self, lambda: (seen.add(threading.current_thread().name), fn_(*args))[1])

    monkeypatch.setattr(threaded, "_threads", lambda: 3)
    monkeypatch.setattr(threaded, "_pool", None)
    monkeypatch.setattr(threaded.ThreadPoolExecutor, "submit", spy)
    got = threaded.binary(fn, x, y)
    with np.errstate(all="ignore"):
        want = fn(x, y)
    assert got is not None and got.dtype == F32 and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    for swapped in (threaded.binary(fn, y, x),):
        with np.errstate(all="ignore"):
            assert swapped is not None and swapped.tobytes() == fn(y, x).tobytes()
    assert len(seen) >= 2 and all(n.startswith("lab-elementwise") for n in seen)


def test_what_it_leaves_to_the_caller():
    big = np.ones((1024, 1024), F32)
    assert threaded.binary(np.add, big[:10, :10], big[:10, :10]) is None  # small
    assert threaded.binary(np.add, big, big.astype(np.float64)) is None  # not float32
    assert threaded.binary(np.maximum, big, big) is None  # not one of the four
    assert threaded.binary(np.add, np.ones(1 << 20, np.int64), np.ones(1 << 20, np.int64)) is None
    assert threaded.binary(lambda a, b: a + b, big, big) is None


@pytest.mark.parametrize("op", ["aten.mul.Tensor", "aten.add.Tensor", "aten.sub.Tensor", "aten.div.Tensor"])
def test_the_entries_on_cpu_give_the_reference_backends_bits(op):
    rng = np.random.default_rng(5)
    a, b = torch.from_numpy(_values(rng, (1024, 768))), torch.from_numpy(_values(rng, (1024, 1)))
    cpu = OpContext(kernels.get_backend("cpu", 2))
    ref = OpContext(kernels.get_backend("reference", 2))
    got = ELEMENTWISE[op](cpu, op, {"self": a, "other": b})
    want = ELEMENTWISE[op](ref, op, {"self": a, "other": b})
    assert got.numpy().tobytes() == want.numpy().tobytes()
