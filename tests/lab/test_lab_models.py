"""Both example families train under the mode: GPT-2 (LayerNorm, GELU tanh, tied embeddings, biases) and
Llama with grouped-query attention; close to stock torch, the same bits on reference and cpu."""

from __future__ import annotations

import numpy as np
import torch

from p2paudit.lab import LabRun
from tests.lab import models

FAMILIES = {
    "gpt2": lambda: models.make_gpt2(),
    "llama-gqa": lambda: models.make(heads=4, kv_heads=2),
}


def train(family: str, backend: str) -> tuple[list[str], list[float], torch.nn.Module]:
    model, opt = FAMILIES[family]()
    run = LabRun(model, opt, backend=backend)
    losses = []
    for i, tokens in enumerate(models.batches(2)):
        with run.step(i):
            losses.append(float(models.train_step(model, opt, tokens)))
    return [r.state.text() for r in run.records], losses, model


def stock(family: str) -> tuple[list[float], torch.nn.Module]:
    model, opt = FAMILIES[family]()
    return [float(models.train_step(model, opt, t)) for t in models.batches(2)], model


def test_gpt2_trains_close_to_stock_and_equal_on_both_backends():
    digests, losses, model = train("gpt2", "cpu")
    stock_losses, stock_model = stock("gpt2")
    np.testing.assert_allclose(losses, stock_losses, rtol=1e-5)
    for (name, p), q in zip(model.named_parameters(), stock_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=2e-5, msg=name)
    assert train("gpt2", "reference")[0] == digests


def test_grouped_query_attention_trains_close_to_stock_and_equal_on_both_backends():
    digests, losses, model = train("llama-gqa", "cpu")
    stock_losses, stock_model = stock("llama-gqa")
    np.testing.assert_allclose(losses, stock_losses, rtol=1e-5)
    for (name, p), q in zip(model.named_parameters(), stock_model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=2e-5, msg=name)
    assert train("llama-gqa", "reference")[0] == digests
