"""Op table 1's entries: close to float64 torch, in the documented order, and bitwise equal on reference and cpu."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kernels
from kernels import reference
from p2paudit.lab import CanonicalMode, LabRun
from tests.lab import models

G = torch.Generator().manual_seed(5)


def rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=G)


TARGETS = torch.arange(15) % 7  # made outside the mode: integer remainder is not in the table
CASES = {
    "sum over (0, 1)": lambda x: x.sum(dim=(0, 1)),
    "mean over -1": lambda x: x.mean(-1, keepdim=True),
    "sum of all": lambda x: x.sum(),
    "log_softmax": lambda x: F.log_softmax(x, dim=-1),
    "softmax": lambda x: F.softmax(x, dim=-1),
    "matmul": lambda x: x @ x.transpose(-1, -2),
    "linear with bias": lambda x: F.linear(x, x[0, :5], x[0, 0, :5]),
    "norm": lambda x: torch.linalg.vector_norm(x),
    "rsqrt of squares": lambda x: torch.rsqrt(x * x + 1e-5),
    "silu": F.silu,
    "sin cos": lambda x: x.sin() * x.cos(),
    "exp log": lambda x: torch.log(torch.exp(x) + 1.0),
    "causal attention": lambda x: F.scaled_dot_product_attention(x[None], x[None], x[None], is_causal=True),
    "cross_entropy": lambda x: F.cross_entropy(x.reshape(-1, 7), TARGETS),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_close_to_float64(case):
    fn = CASES[case]
    x = rand(3, 5, 7)
    with CanonicalMode(kernels.get_backend("cpu")) as m:
        got = fn(x)
    want = fn(x.double())
    assert got.dtype == torch.float32 and m.calls  # the mode ran it
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=2e-6)


def test_a_sum_over_two_dims_is_one_pairwise_tree_in_c_order():
    x = rand(3, 5, 7)
    with CanonicalMode(kernels.get_backend("cpu")):
        got = x.sum(dim=(0, 1))
    rows = np.ascontiguousarray(x.numpy().reshape(15, 7).T)  # each column's 15 values in (b, t) order
    assert np.array_equal(got.numpy(), reference.sum_rows(rows))
    assert not np.array_equal(got.numpy(), x.numpy().sum(axis=(0, 1)))  # numpy's own order differs here


def test_a_backward_matches_float64_autograd():
    w = rand(6, 4).requires_grad_()
    x = rand(5, 6)
    with CanonicalMode(kernels.get_backend("cpu")):
        y = F.silu(x @ w).pow(2).mean()
        y.backward()
    w64 = w.detach().double().requires_grad_()
    F.silu(x.double() @ w64).pow(2).mean().backward()
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-5, atol=1e-7)


def train(backend: str, arithmetic: int) -> list[str]:
    model, opt = models.make()
    run = LabRun(model, opt, backend=backend, arithmetic=arithmetic)
    for i, tokens in enumerate(models.batches(2)):
        with run.step(i):
            models.train_step(model, opt, tokens)
    return [r.state.text() for r in run.records]


@pytest.mark.parametrize("arithmetic", [1, 2])
def test_reference_and_cpu_give_the_same_bits(arithmetic):
    assert train("reference", arithmetic) == train("cpu", arithmetic)


def test_the_arithmetic_versions_differ():
    assert train("cpu", 1) != train("cpu", 2)


def test_canonical_training_stays_close_to_stock_torch():
    data = models.batches(3)
    model, opt = models.make()
    run = LabRun(model, opt, backend="cpu")
    losses = []
    for i, tokens in enumerate(data):
        with run.step(i):
            losses.append(float(models.train_step(model, opt, tokens)))
    stock_model, stock_opt = models.make()
    stock_losses = [float(models.train_step(stock_model, stock_opt, t)) for t in data]
    np.testing.assert_allclose(losses, stock_losses, rtol=1e-5)
    for (name, p), q in zip(model.named_parameters(), stock_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
