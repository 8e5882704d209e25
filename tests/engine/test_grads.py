"""The hand-written backward pass against torch autograd in float64 on the same model.

The forward pass is written again below in torch float64, independently of
the engine's code; torch.autograd differentiates it. Tolerance: for every
parameter, max |ours - autograd| <= 1e-4 * max |autograd| + 1e-7 (our pass is
float32 with our own exp/log; float64 autograd stands in for exact values).
The loss agrees to 1e-5 relative.
"""

import dataclasses

import numpy as np
import pytest
import torch
from engine_helpers import assert_grads_close, shrunk_config, text_corpus

import kernels
from p2paudit.engine.model import NORM_EPS
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state, param_shapes
from p2paudit.engine.step import micro_batch_grads

REL_TOL = 1e-4


def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + float(NORM_EPS)) * w


def torch_loss(p: dict[str, torch.Tensor], tokens: torch.Tensor, model) -> torch.Tensor:
    """The documented model (docs/engine.md) in float64 torch."""
    B, T, H, C = tokens.shape[0], model.seq_len, model.n_head, model.n_embd
    D = C // H
    idx, tgt = tokens[:, :-1], tokens[:, 1:]
    x = p["wte"][idx] + p["wpe"][torch.arange(T)]  # (B, T, C)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for layer in range(model.n_layer):
        w = {k[len(f"h.{layer}.") :]: v for k, v in p.items() if k.startswith(f"h.{layer}.")}
        a = rms(x, w["ln1"])
        q, k, v = ((a @ w["attn." + n]).view(B, T, H, D).transpose(1, 2) for n in ("wq", "wk", "wv"))
        att = (q @ k.transpose(-1, -2)) / D**0.5
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + o @ w["attn.wo"]
        h = rms(x, w["ln2"]) @ w["mlp.w_fc"]
        x = x + torch.nn.functional.silu(h) @ w["mlp.w_proj"]
    head = p["wte"] if model.tied_head else p["lm_head"]
    logits = rms(x, p["ln_f"]) @ head.T
    return torch.nn.functional.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1))


def perturbed_state(cfg):
    """The init state with norm gains away from 1.0, so their gradients are exercised too."""
    state = init_state(cfg)
    r = np.random.default_rng(0)
    for name in param_shapes(cfg.model):
        if name.endswith(("ln1", "ln2", "ln_f")):
            g = state["params/" + name]
            state["params/" + name] = (g + r.uniform(-0.3, 0.3, g.shape)).astype(np.float32)
    return state


def autograd_grads(state, tokens, model):
    p = {n: torch.tensor(state["params/" + n], dtype=torch.float64, requires_grad=True) for n in param_shapes(model)}
    loss = torch_loss(p, torch.from_numpy(tokens), model)
    loss.backward()
    return {n: t.grad.numpy() for n, t in p.items()}, loss.item()


@pytest.mark.parametrize("tied", [True, False])
def test_gradients_match_float64_autograd(tied):
    cfg = shrunk_config(micro_batches=1, seq_len=16, tied=tied)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, n_layer=2))
    state = perturbed_state(cfg)
    tokens = batch_for_step(text_corpus(), b"grad-test", cfg, 0)[0]
    ours, loss = micro_batch_grads(state, tokens, cfg, kernels.get_backend("reference"))
    want, want_loss = autograd_grads(state, tokens, cfg.model)
    assert list(ours) == list(want)
    assert abs(float(loss) - want_loss) <= 1e-5 * want_loss
    assert_grads_close(ours, want, REL_TOL)


def test_the_comparison_can_fail():
    # A wrong model (attention scale left out) must fail the same tolerance.
    cfg = shrunk_config(micro_batches=1, seq_len=16)
    state = perturbed_state(cfg)
    tokens = batch_for_step(text_corpus(), b"grad-test", cfg, 0)[0]
    ours, _ = micro_batch_grads(state, tokens, cfg, kernels.get_backend("reference"))
    wrong = dataclasses.replace(cfg.model, n_head=1)  # same weights, one wide head: different function
    want, _ = autograd_grads(state, tokens, wrong)
    errs = [np.abs(ours[n] - want[n]).max() / np.abs(want[n]).max() for n in want if "attn" in n]
    assert max(errs) > REL_TOL


def test_stock_float32_torch_is_close_but_not_bitwise_equal():
    # The failing baseline: ordinary float32 autograd agrees to rounding error, never to the bit.
    cfg = shrunk_config(micro_batches=1, seq_len=16)
    state = perturbed_state(cfg)
    tokens = batch_for_step(text_corpus(), b"grad-test", cfg, 0)[0]
    ours, _ = micro_batch_grads(state, tokens, cfg, kernels.get_backend("reference"))
    p = {n: torch.tensor(state["params/" + n], requires_grad=True) for n in param_shapes(cfg.model)}
    torch_loss(p, torch.from_numpy(tokens), cfg.model).backward()
    stock = {n: t.grad.numpy() for n, t in p.items()}
    assert all(np.allclose(ours[n], stock[n], rtol=1e-3, atol=1e-6) for n in ours)
    assert sum(ours[n].tobytes() != stock[n].tobytes() for n in ours) >= len(ours) // 2
