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
    "layer_norm": lambda x: F.layer_norm(x, (7,), x[0, 0], x[0, 1]),
    "gelu tanh": lambda x: F.gelu(x, approximate="tanh"),
    "tanh": torch.tanh,
    "grouped attention": lambda x: F.scaled_dot_product_attention(
        x[None].repeat(1, 2, 1, 1), x[None], x[None], is_causal=True, enable_gqa=True
    ),
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


BACKWARDS = {
    "silu, pow, mean": lambda x, w: F.silu(x @ w).pow(2).mean(),
    "layer_norm, gelu": lambda x, w: F.gelu(F.layer_norm(x @ w, (4,), w[0], w[1]), approximate="tanh").sum(),
    "tanh, softmax": lambda x, w: (F.softmax(torch.tanh(x @ w), dim=-1) * x[:, :4]).sum(),
    "grouped attention": lambda x, w: F.scaled_dot_product_attention(
        (x @ w).view(1, 2, 5, 2), (x @ w)[:, :2].reshape(1, 1, 5, 2), (x @ w)[:, 2:].reshape(1, 1, 5, 2),
        is_causal=True, enable_gqa=True,
    ).sum(),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BACKWARDS))
def test_a_backward_matches_float64_autograd(case):
    fn = BACKWARDS[case]
    w = rand(6, 4).requires_grad_()
    x = rand(5, 6)
    with CanonicalMode(kernels.get_backend("cpu")):
        fn(x, w).backward()
    w64 = w.detach().double().requires_grad_()
    fn(x.double(), w64).backward()
    scale = float(w64.grad.abs().max())  # float32 rounding of values that large: stock float32 errs 4x more here
    torch.testing.assert_close(w.grad.double(), w64.grad, rtol=1e-5, atol=1e-6 * max(1.0, scale))


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
