"""The backward of a causal attention takes its forward's p (p2paudit/lab/context.py), and only when q, k and the
output are the forward's own: same memory, shape, strides and version."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import kernels
from p2paudit.lab.context import OpContext
from p2paudit.lab.mode import CanonicalMode


def test_the_backward_takes_the_forward_p_from_the_cache() -> None:
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
