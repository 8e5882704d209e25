"""Tiny models written as a lab would write them (plain torch, nothing of p2paudit): what lab.warm trains to
compile the lab mode's kernels, and what the lab-mode tests (tests/lab/models.py) train.

`TinyGPT2`: nanoGPT's GPT-2 (learned positions, LayerNorm with biases, GELU tanh, tied head).

`TinyLlama`: token embedding, blocks of RMSNorm (hand-written: pow, mean,
rsqrt), attention with RoPE (sin/cos of the positions) and causal SDPA,
SwiGLU MLP, a final RMSNorm and an untied head. `train(model, batches, ...)`
is the loop: cross_entropy, backward, clip_grad_norm_, AdamW(fused=True).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, c: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of x (B, H, T, D), pairs (2i, 2i+1) rotated by pos * 10000^(-2i/D)."""
    t, d = x.shape[-2], x.shape[-1]
    pos = torch.arange(t, dtype=torch.float32)
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    angle = torch.outer(pos, inv)  # (T, D/2)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, c: int, heads: int, extra_op: bool = False, kv_heads: int | None = None) -> None:
        super().__init__()
        self.heads, self.extra_op = heads, extra_op
        self.kv_heads = kv_heads or heads
        self.norm1, self.norm2 = RMSNorm(c), RMSNorm(c)
        self.qkv = nn.Linear(c, c + 2 * (c // heads) * self.kv_heads, bias=False)
        self.proj = nn.Linear(c, c, bias=False)
        self.gate = nn.Linear(c, 4 * c, bias=False)
        self.up = nn.Linear(c, 4 * c, bias=False)
        self.down = nn.Linear(4 * c, c, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape  # (B, T, C)
        d = c // self.heads
        q, k, v = self.qkv(self.norm1(x)).split([c, d * self.kv_heads, d * self.kv_heads], dim=-1)
        q = q.view(b, t, self.heads, d).transpose(1, 2)  # (B, H, T, D)
        k, v = (z.view(b, t, self.kv_heads, d).transpose(1, 2) for z in (k, v))  # (B, H_kv, T, D)
        q, k = rope(q), rope(k)
        gqa = self.kv_heads != self.heads
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)  # (B, H, T, D)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        h = self.norm2(x)
        if self.extra_op:
            h = h * 1.0  # one more op in the graph, the same values
        return x + self.down(F.silu(self.gate(h)) * self.up(h))  # type: ignore[no-any-return]


class TinyLlama(nn.Module):
    def __init__(
        self,
        vocab: int = 64,
        c: int = 32,
        heads: int = 4,
        layers: int = 2,
        extra_op: bool = False,
        kv_heads: int | None = None,
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, c)
        self.blocks = nn.ModuleList([Block(c, heads, extra_op, kv_heads) for _ in range(layers)])
        self.norm = RMSNorm(c)
        self.head = nn.Linear(c, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)  # (B, T, C)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))  # type: ignore[no-any-return]  # (B, T, V)


def init_from_numpy(model: nn.Module, seed: int) -> None:
    """Every matrix N(0, 0.02) and every vector ones, drawn by numpy: the same bits on any instruction set.

    torch's own initialisers (uniform_, normal_) take vectorised paths that differ between
    ATEN_CPU_CAPABILITY settings, so a run's initial state is the lab's published checkpoint, not its RNG.
    """
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            values = rng.standard_normal(p.shape) * 0.02 if p.dim() > 1 else np.ones(p.shape)
            p.copy_(torch.from_numpy(values.astype(np.float32)))


class GPT2Block(nn.Module):
    def __init__(self, c: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape  # (B, T, C)
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))  # type: ignore[no-any-return]


class TinyGPT2(nn.Module):
    """nanoGPT's shape: learned positions, LayerNorm with biases, GELU (tanh), the head tied to the embedding."""

    def __init__(self, vocab: int = 64, c: int = 32, heads: int = 4, layers: int = 2, block: int = 64) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(block, c)
        self.h = nn.ModuleList([GPT2Block(c, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(c)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # (B, T, V), tied


def make_gpt2(seed: int = 0, **kwargs: object) -> tuple[TinyGPT2, torch.optim.AdamW]:
    """A TinyGPT2 initialised from `seed` (biases zero, LayerNorm weights one) and its AdamW(fused=True)."""
    model = TinyGPT2(**kwargs)  # type: ignore[arg-type]
    init_from_numpy(model, seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, fused=True)


def make(seed: int = 0, **kwargs: object) -> tuple[TinyLlama, torch.optim.AdamW]:
    """A TinyLlama initialised from `seed` and its AdamW(fused=True)."""
    model = TinyLlama(**kwargs)  # type: ignore[arg-type]
    init_from_numpy(model, seed)
    return model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1, fused=True)


def batches(steps: int, b: int = 2, t: int = 8, vocab: int = 64, seed: int = 1) -> list[torch.Tensor]:
    """`steps` int64 token batches (B, T+1), drawn by numpy."""
    rng = np.random.default_rng(seed)
    return [torch.from_numpy(rng.integers(0, vocab, (b, t + 1), dtype=np.int64)) for _ in range(steps)]


def train_step(model: nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> torch.Tensor:
    """One step of the lab's loop: forward, cross_entropy, backward, clip, AdamW."""
    logits = model(tokens[:, :-1])  # (B, T, V)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))
    loss.backward()  # type: ignore[no-untyped-call]
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    return loss.detach()
