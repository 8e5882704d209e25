"""A lab's own nanoGPT-style GPT-2 and loop, trained under p2paudit's strict canonical mode.

An ordinary PyTorch script: learned positions, LayerNorm with biases, GELU (tanh form), biases on
every Linear, the head tied to the token embedding; cross_entropy, clip_grad_norm_, AdamW(fused=True).
The lab-script interface (docs/lab-mode.md): `build()`, `batch(step)`, `train_step(model, opt, tokens)`.

    PYTHONPATH=. python examples/lab_gpt2.py --steps 3     # prints each step's state and trace digest
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

VOCAB, C, HEADS, LAYERS, T, B = 256, 64, 4, 2, 32, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape  # (B, T, C)
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, HEADS, C // HEADS).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(b, t, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, C), nn.Embedding(T, C)
        self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))  # (B, T, C)
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # (B, T, V): the tied head


def build() -> tuple[nn.Module, torch.optim.Optimizer]:
    """Matrices N(0, 0.02), LayerNorm weights one and biases zero, drawn by numpy; AdamW(fused=True)."""
    model = GPT()
    rng = np.random.default_rng(0)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            values = (
                rng.standard_normal(p.shape) * 0.02
                if p.dim() > 1
                else np.full(p.shape, 0.0 if name.endswith("bias") else 1.0)
            )
            p.copy_(torch.from_numpy(values.astype(np.float32)))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, fused=True)


def batch(step: int) -> torch.Tensor:
    """Step `step`'s tokens (B, T+1): a fixed pseudo-random stream (a lab would read its data here)."""
    rng = np.random.default_rng(2000 + step)
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
