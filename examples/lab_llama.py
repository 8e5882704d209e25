"""A lab's own Llama-style model and loop, trained under p2paudit's strict canonical mode.

An ordinary PyTorch script: RMSNorm, RoPE, SwiGLU, grouped-query attention (4 query heads over 2
key/value heads), an untied head, cross_entropy, clip_grad_norm_ and AdamW(fused=True). p2paudit
reads the three functions of the lab-script interface (docs/lab-mode.md): `build()` -> (model,
optimizer), `batch(step)` -> int64 tokens (B, T+1), `train_step(model, optimizer, tokens)` -> loss.

    PYTHONPATH=. python examples/lab_llama.py --steps 3     # prints each step's state and trace digest
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

VOCAB, C, HEADS, KV_HEADS, LAYERS, T, B = 256, 64, 4, 2, 2, 32, 4


class RMSNorm(nn.Module):
    def __init__(self, c: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(c))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotate the pairs (2i, 2i+1) of x (B, H, T, D) by position * 10000^(-2i/D)."""
    t, d = x.shape[-2], x.shape[-1]
    angle = torch.outer(
        torch.arange(t, dtype=torch.float32), 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    )
    cos, sin = angle.cos(), angle.sin()  # (T, D/2)
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.d = C // HEADS
        self.norm1, self.norm2 = RMSNorm(C), RMSNorm(C)
        self.q, self.kv = nn.Linear(C, C, bias=False), nn.Linear(C, 2 * KV_HEADS * self.d, bias=False)
        self.o = nn.Linear(C, C, bias=False)
        self.gate, self.up, self.down = (
            nn.Linear(C, 4 * C, bias=False),
            nn.Linear(C, 4 * C, bias=False),
            nn.Linear(4 * C, C, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape  # (B, T, C)
        h = self.norm1(x)
        q = self.q(h).view(b, t, HEADS, self.d).transpose(1, 2)  # (B, H, T, D)
        k, v = self.kv(h).view(b, t, 2 * KV_HEADS, self.d).transpose(1, 2).split(KV_HEADS, dim=1)  # (B, H_kv, T, D)
        y = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True, enable_gqa=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, t, C))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, C)
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm, self.head = RMSNorm(C), nn.Linear(C, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))  # (B, T, V)


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    """The model, initialised from numpy (torch's initialisers differ between instruction sets), and AdamW."""
    model = Llama()
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(
                torch.from_numpy(
                    (rng.standard_normal(p.shape) * 0.02 if p.dim() > 1 else np.ones(p.shape)).astype(np.float32)
                )
            )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, fused=True)


def batch(step: int) -> torch.Tensor:
    """Step `step`'s tokens (B, T+1): a fixed pseudo-random stream (a lab would read its data here)."""
    rng = np.random.default_rng(1000 + step)
    return torch.from_numpy(rng.integers(0, VOCAB, (B, T + 1), dtype=np.int64))


def train_step(model: nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor) -> torch.Tensor:
    logits = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    return loss.detach()


if __name__ == "__main__":
    from p2paudit.lab import LabRun

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--backend", default="cpu")
    args = ap.parse_args()
    model, opt = build()
    run = LabRun(model, opt, backend=args.backend)
    for i in range(args.steps):
        with run.step(i):
            loss = train_step(model, opt, batch(i))
        print(
            f"step {i} loss {float(loss):.6f} state {run.records[i].state.text()} trace sha256:{run.records[i].trace.hex()}"
        )
