"""The backward of a causal attention takes its forward's p (p2paudit/lab/context.py), and only when q, k and the
output are the forward's own: same memory, shape, strides and version; the cache holds no more p than its
budget (P2PAUDIT_LAB_ATTENTION_CACHE), and a backward without its p recomputes the same bits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kernels
from p2paudit.errors import InputError
from p2paudit.lab import LabRun
from p2paudit.lab.context import ATTENTION_CACHE_ENV, OpContext, attention_cache_budget
from p2paudit.lab.mode import CanonicalMode
from p2paudit.sizes import physical_memory
from tests.lab import models


def test_the_backward_takes_the_forward_p_from_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ATTENTION_CACHE_ENV, "1G")
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    mode = CanonicalMode(kernels.get_backend("cpu"))
    with mode:
        y = F.scaled_dot_product_attention(q, q * 1.0, q * 2.0, is_causal=True)  # (B, H, T, D)
        assert len(mode.ctx.attention) == 1
        y.sum().backward()
    assert mode.ctx.attention == {}  # autograd gave the backward other tensor objects: the key still found it
    assert q.grad is not None and bool(torch.isfinite(q.grad).all())


def test_another_k_or_an_in_place_write_misses_the_cache() -> None:
    ctx = OpContext(kernels.get_backend("cpu"))
    q, k, out = torch.ones(1, 1, 4, 2), torch.ones(1, 1, 4, 2), torch.ones(1, 1, 4, 2)
    p = np.ones((1, 4, 4), np.float32)
    ctx.save_attention(q, k, out, p)
    assert ctx.take_attention(q, q, out) is None  # other memory
    assert ctx.take_attention(q, k.view(1, 1, 2, 4), out) is None  # another shape over the same memory
    out.add_(1.0)  # the output was written: its version moved
    assert ctx.take_attention(q, k, out) is None
    ctx.save_attention(q, k, out, p)
    assert ctx.take_attention(q, k, out) is p
    assert ctx.take_attention(q, k, out) is None  # taken once


def test_inference_tensors_are_not_cached_and_do_not_fail() -> None:
    ctx = OpContext(kernels.get_backend("cpu"))
    with torch.inference_mode():
        q = torch.ones(1, 1, 4, 2)  # an inference tensor: no version counter to key it by
    ctx.save_attention(q, q, q, np.ones((1, 4, 4), np.float32))
    assert ctx.attention == {} and ctx.take_attention(q, q, q) is None


def test_the_cache_keeps_no_more_p_than_its_budget() -> None:
    p = np.ones((1, 4, 4), np.float32)  # 64 bytes
    ctx = OpContext(kernels.get_backend("cpu"), attention_budget=100)
    q, k, out, other = (torch.ones(1, 1, 4, 2) for _ in range(4))
    ctx.save_attention(q, k, out, p)
    ctx.save_attention(q, k, other, p)  # 128 bytes: past the budget, not kept
    assert len(ctx.attention) == 1 and ctx.attention_kept == 64
    assert ctx.take_attention(q, k, other) is None
    assert ctx.take_attention(q, k, out) is p and ctx.attention_kept == 0
    ctx.save_attention(q, k, other, p)  # room again
    assert ctx.take_attention(q, k, other) is p


def test_the_budget_comes_from_the_environment_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ATTENTION_CACHE_ENV, raising=False)
    assert attention_cache_budget() is None  # the mode chooses
    monkeypatch.setenv(ATTENTION_CACHE_ENV, "0")
    assert attention_cache_budget() == 0 and OpContext(kernels.get_backend("cpu")).attention_budget == 0
    monkeypatch.setenv(ATTENTION_CACHE_ENV, "2G")
    assert attention_cache_budget() == 2 << 30
    monkeypatch.setenv(ATTENTION_CACHE_ENV, "-1")
    with pytest.raises(InputError, match=r"^P2PAUDIT_LAB_ATTENTION_CACHE='-1': want a size in bytes"):
        attention_cache_budget()


def test_a_step_that_recomputes_every_p_has_the_same_state_and_op_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache changes the time a step takes, never its bits: a Llama step (grouped-query attention) with no
    p kept (every backward recomputes it, on cpu a block of rows at a time) equals the step that keeps them
    all, state and trace; unset, the mode keeps none on cpu."""
    records, hits = {}, {}
    take = OpContext.take_attention

    def counted(ctx: OpContext, *tensors: torch.Tensor) -> np.ndarray | None:
        p = take(ctx, *tensors)
        hits[budget] += p is not None
        return p

    monkeypatch.setattr(OpContext, "take_attention", counted)
    for budget in ("1G", "0", ""):
        monkeypatch.setenv(ATTENTION_CACHE_ENV, budget)
        hits[budget] = 0
        model, opt = models.make(vocab=96, c=32, heads=4, layers=2, kv_heads=2)
        run = LabRun(model, opt, backend="cpu")
        for i, tokens in enumerate(models.batches(2, b=2, t=24, vocab=96)):
            with run.step(i) as mode:
                models.train_step(model, opt, tokens)
            assert mode.ctx.attention_kept == 0 and mode.ctx.attention == {}
        records[budget] = [(r.state.digest, r.trace) for r in run.records]
    assert records["1G"] == records["0"] == records[""]
    assert hits == {"1G": 4, "0": 0, "": 0}  # two layers, two steps: every backward found its p, or none


def test_unset_the_cpu_backend_keeps_no_p_and_the_others_a_quarter_of_memory() -> None:
    q, k = torch.ones(1, 2, 3, 4), torch.ones(1, 2, 3, 4)
    assert not OpContext(kernels.get_backend("cpu"), attention_budget=None).keeps_attention(q, k, 64)
    reference = OpContext(kernels.get_backend("reference"), attention_budget=None)
    assert reference.keeps_attention(q, k, 64)  # its backward needs p whole: kept within the quarter
    assert not reference.keeps_attention(q, k, physical_memory())
    assert OpContext(kernels.get_backend("cpu"), attention_budget=1 << 20).keeps_attention(q, k, 64)  # a size set
    assert not OpContext(kernels.get_backend("cpu"), attention_budget=0).keeps_attention(q, k, 64)
    with torch.inference_mode():
        i = torch.ones(1, 2, 3, 4)
    assert not reference.keeps_attention(i, i, 64)


@pytest.mark.parametrize("t", [40, 1037])
def test_on_cpu_unset_no_p_is_kept_and_the_bits_are_those_of_p_kept(monkeypatch: pytest.MonkeyPatch, t: int) -> None:
    """Unset, the forward keeps no p (never makes it whole) and the backward recomputes it: the same output
    and gradients as with p kept, at a short T and past the stored-p backward's head tasks (1,024)."""
    grads = {}
    for budget in ("", "1G"):
        monkeypatch.setenv(ATTENTION_CACHE_ENV, budget)
        q = torch.randn(1, 2, t, 8, generator=torch.Generator().manual_seed(0), requires_grad=True)
        mode = CanonicalMode(kernels.get_backend("cpu"))
        with mode:
            y = F.scaled_dot_product_attention(q, q * 1.5, q * 2.0, is_causal=True)
            assert len(mode.ctx.attention) == (budget == "1G")
            (y * y).sum().backward()
        assert q.grad is not None
        grads[budget] = (y.detach().numpy().tobytes(), q.grad.numpy().tobytes())
    assert grads[""] == grads["1G"]
