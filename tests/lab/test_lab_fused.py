"""The cpu backend's fused lab kernels (kernels/cpu_lab.py) give the bits of the table's composition, which the
reference backend computes function by function: on rows of every width class (1, odd, past 1024), with huge,
tiny, infinite and NaN entries, and attention with an infinite v (the products then fold every term)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kernels
from p2paudit.lab.context import OpContext
from p2paudit.lab.mode import CanonicalMode

SDPA = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default


def bits(t: torch.Tensor) -> np.ndarray:
    """The float32 bit patterns, every NaN as one pattern (a NaN's payload is not a value of the table)."""
    x = t.detach().numpy().astype(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), x).view(np.uint32)


def rows(rng: np.random.Generator, r: int, c: int) -> torch.Tensor:
    x = (rng.standard_normal((r, c)) * rng.choice([1e-3, 1.0, 30.0, 1e4], (r, 1))).astype(np.float32)
    x[0, :] = -np.inf  # a row with no finite entry
    x[1, rng.integers(c)] = np.inf
    if r > 2:
        x[2, rng.integers(c)] = np.nan
    if r > 3:
        x[3, :] = np.float32(1e-42)  # subnormals
    return torch.from_numpy(x)


def log_softmax_both_ways(backend: str, x: torch.Tensor, dy: torch.Tensor) -> list[np.ndarray]:
    x = x.clone().requires_grad_(True)
    with CanonicalMode(kernels.get_backend(backend, 2)):
        y = F.log_softmax(x, dim=-1)
        y.backward(dy)
    assert x.grad is not None
    return [bits(y), bits(x.grad)]


@pytest.mark.parametrize("width", [1, 3, 17, 64, 1000, 2000])
def test_log_softmax_and_its_backward_fused_equal_the_composition(width: int) -> None:
    rng = np.random.default_rng(width)
    x, dy = rows(rng, 6, width), torch.from_numpy(rng.standard_normal((6, width)).astype(np.float32))
    fused, composed = log_softmax_both_ways("cpu", x, dy), log_softmax_both_ways("reference", x, dy)
    for a, b in zip(fused, composed):
        np.testing.assert_array_equal(a, b)


def attention_outputs(backend: str, arithmetic: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> list:
    with CanonicalMode(kernels.get_backend(backend, arithmetic)):
        out = SDPA(q, k, v, 0.0, True)
    return [bits(out[0]), bits(out[1])]


@pytest.mark.parametrize("t", [1, 5, 40, 77])
@pytest.mark.parametrize("arithmetic", [1, 2])
def test_attention_fused_equals_the_composition(t: int, arithmetic: int) -> None:
    rng = np.random.default_rng(t)
    q, k, v = (torch.from_numpy((rng.standard_normal((2, 3, t, 8)) * 3).astype(np.float32)) for _ in range(3))
    q[0, 0, -1, 0] = 1e30  # scores that overflow to inf in some rows
    for vv in (v, v.clone().index_put_((torch.tensor(0),), torch.tensor(np.inf))):  # a finite v, then an inf in v
        fused = attention_outputs("cpu", arithmetic, q, k, vv)
        composed = attention_outputs("reference", arithmetic, q, k, vv)
        for a, b in zip(fused, composed):
            np.testing.assert_array_equal(a, b)


def attention_grads(backend: str, arithmetic: int, qkv: list[torch.Tensor], dout: torch.Tensor) -> list:
    q, k, v = (x.clone().requires_grad_(True) for x in qkv)
    with CanonicalMode(kernels.get_backend(backend, arithmetic)):
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)
    return [bits(x.grad) for x in (q, k, v) if x.grad is not None]


@pytest.mark.parametrize("t", [1, 13, 40])
@pytest.mark.parametrize("arithmetic", [1, 2])
def test_attention_backward_of_the_modes_own_p_equals_the_composition(t: int, arithmetic: int) -> None:
    """The cpu entry trusts the p its forward kept (its masked entries +0.0, no scan of them) and folds only
    the terms the composition's bits need: dq, dk, dv equal the reference's, with a finite output gradient,
    an inf in it (+0.0 x inf is NaN: every term folded) and -0.0s carried through version 2's folds."""
    rng = np.random.default_rng(100 + t)
    qkv = [torch.from_numpy((rng.standard_normal((2, 3, t, 8)) * 3).astype(np.float32)) for _ in range(3)]
    dout = torch.from_numpy(rng.standard_normal((2, 3, t, 8)).astype(np.float32))
    tiny = dout.clone()
    tiny[0, 0] = -1e-30  # products below float32's range: -0.0 accumulators in version 2
    for d in (dout, dout.clone().index_put_((torch.tensor(1),), torch.tensor(np.inf)), tiny):
        fused, composed = attention_grads("cpu", arithmetic, qkv, d), attention_grads("reference", arithmetic, qkv, d)
        assert len(fused) == 3
        for a, b in zip(fused, composed):
            np.testing.assert_array_equal(a, b)


def test_the_cpu_backend_at_either_version_takes_the_fused_kernels() -> None:
    ctxs = {(b, v): OpContext(kernels.get_backend(b, v)) for b in ("cpu", "reference") for v in (1, 2)}
    assert {key: (c.cpu, c.fused) for key, c in ctxs.items()} == {
        ("cpu", 1): (True, False),
        ("cpu", 2): (True, True),
        ("reference", 1): (False, False),
        ("reference", 2): (False, True),
    }


def test_adamw_in_place_writes_the_bits_of_the_backend_update() -> None:
    from kernels import cpu, cpu_lab

    rng = np.random.default_rng(9)
    p, g, m = (rng.standard_normal((37, 5)).astype(np.float32) for _ in range(3))
    v = np.abs(rng.standard_normal((37, 5))).astype(np.float32)
    want = cpu.adamw(p, g, m, v, 3, 3e-3, 0.9, 0.95, 1e-8, 0.1)
    cpu_lab.adamw_in_place(p, g, m, v, 3, 3e-3, 0.9, 0.95, 1e-8, 0.1)  # p, m, v read and written in place
    for got, w in zip((p, m, v), want):
        np.testing.assert_array_equal(got.view(np.uint32), w.view(np.uint32))
