"""The workloads of benchmarks/gpu_check.py: each op at a training size, its seeded inputs, torch's own op.

Inputs are drawn from numpy's generator seeded by (SEED, position in
_version_1_workloads), so they are the same on every machine; the ops that fold
dot products (kernels.versions.FOLDS) come twice, at arithmetic version 1 and,
on the same inputs, at version 2 ("matmul@v2").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SEED = 20261129

# Training-sized shapes ("full") and interpreter-sized ones ("quick"). A row of
# W = 8192 or V = 8192 takes the multi-pass tree (wider than one 2^10 block).
SIZES = {
    "full": dict(M=2048, K=768, N=2304, R=8192, C=768, RW=4096, W=8192, BH=24, T=1024, D=64,
                 E=1 << 24, NV=4096, V=8192, EV=8192, TOK=8192),
    "quick": dict(M=33, K=17, N=65, R=70, C=33, RW=3, W=1100, BH=2, T=33, D=8,
                  E=3000, NV=5, V=1100, EV=17, TOK=40),
}  # fmt: skip


@dataclass(frozen=True)
class Workload:
    """One op at one shape and arithmetic version: how to make its inputs, and torch's own version of it."""

    name: str
    op: str
    make: Callable  # (rng, sizes) -> tuple of numpy arguments
    torch_op: Callable  # (device args) -> zero-argument callable running torch's op
    inputs: int = 0  # the inputs' generator is seeded by (SEED, inputs): a version 2 twin shares its v1 inputs
    arithmetic: int = 1


def _n(rng, *shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _causal(t, device):
    import torch

    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


def _torch_softmax(s, keep):
    import torch

    return torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1)


def _torch_attention(q, k, v, keep):
    p = _torch_softmax((q @ k.transpose(1, 2)) * q.shape[-1] ** -0.5, keep)
    return p @ v, p


def _torch_attention_backward(q, k, v, p, do):
    scale = q.shape[-1] ** -0.5
    dp = do @ v.transpose(1, 2)
    dv = p.transpose(1, 2) @ do
    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
    return (ds @ k) * scale, (ds.transpose(1, 2) @ q) * scale, dv


def _torch_rmsnorm_backward(x, w, rstd, dy):
    xhat = x * rstd[:, None]
    g = dy * w
    return (g - xhat * (g * xhat).mean(1, keepdim=True)) * rstd[:, None], (dy * xhat).sum(0)


def _torch_ce_backward(l, t):
    import torch

    g = torch.softmax(l, dim=1)
    g[torch.arange(l.shape[0], device=l.device), t] -= 1.0
    return g / l.shape[0]


def _torch_adamw(p, g, m, v, step, lr, b1, b2, eps, wd):
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g * g
    den = (v2.sqrt() / (1 - b2**step) ** 0.5) + eps
    return p * (1 - lr * wd) - (lr / (1 - b1**step)) * (m2 / den), m2, v2


def workloads() -> list[Workload]:
    """Every op of the backend at version 1, each fold followed by its version 2 twin ("name@v2")."""
    from kernels.versions import FOLDS

    out = []
    for i, w in enumerate(_version_1_workloads()):
        out.append(dataclasses.replace(w, inputs=i))
        if w.op in FOLDS:
            out.append(dataclasses.replace(w, name=f"{w.name}@v2", inputs=i, arithmetic=2))
    return out


def _version_1_workloads() -> list[Workload]:
    """Every op of the backend once; the position in this list seeds the inputs (do not reorder)."""
    import torch
    import torch.nn.functional as F

    W = Workload
    ad = (7, 1e-3, 0.9, 0.95, 1e-8, 0.1)
    return [
        W("matmul", "matmul", lambda r, s: (_n(r, s["M"], s["K"]), _n(r, s["K"], s["N"])), lambda a, b: lambda: a @ b),
        W("matmul_nt", "matmul_nt", lambda r, s: (_n(r, s["M"], s["K"]), _n(r, s["N"], s["K"])), lambda a, b: lambda: a @ b.T),
        W("matmul_tn", "matmul_tn", lambda r, s: (_n(r, s["K"], s["M"]), _n(r, s["K"], s["N"])), lambda a, b: lambda: a.T @ b),
        W("bmm", "matmul", lambda r, s: (_n(r, s["BH"], s["T"], s["D"]), _n(r, s["BH"], s["D"], s["T"])),
          lambda a, b: lambda: torch.bmm(a, b)),
        W("sum_rows", "sum_rows", lambda r, s: (_n(r, s["R"], s["C"]),), lambda x: lambda: x.sum(1)),
        W("sum_cols", "sum_cols", lambda r, s: (_n(r, s["R"], s["C"]),), lambda x: lambda: x.sum(0)),
        W("max_rows", "max_rows", lambda r, s: (_n(r, s["RW"], s["W"]),), lambda x: lambda: x.amax(1)),
        W("exp", "exp", lambda r, s: (_n(r, s["E"], scale=8.0),), lambda x: lambda: torch.exp(x)),
        W("log", "log", lambda r, s: (np.abs(_n(r, s["E"], scale=100.0)),), lambda x: lambda: torch.log(x)),
        W("silu", "silu", lambda r, s: (_n(r, s["E"], scale=4.0),), lambda x: lambda: F.silu(x)),
        W("silu_backward", "silu_backward", lambda r, s: (_n(r, s["E"], scale=4.0), _n(r, s["E"])),
          lambda x, dy: lambda: dy * torch.sigmoid(x) * (1 + x * (1 - torch.sigmoid(x)))),
        W("softmax_causal", "softmax_causal", lambda r, s: (_n(r, s["BH"], s["T"], s["T"], scale=3.0),),
          lambda x: (lambda keep: lambda: _torch_softmax(x, keep))(_causal(x.shape[-1], x.device))),
        W("softmax_causal_backward", "softmax_causal_backward",
          lambda r, s: (np.abs(_n(r, s["BH"], s["T"], s["T"])) / np.float32(s["T"]), _n(r, s["BH"], s["T"], s["T"])),
          lambda p, dp: lambda: p * (dp - (p * dp).sum(-1, keepdim=True))),
        W("attention", "attention", lambda r, s: tuple(_n(r, s["BH"], s["T"], s["D"]) for _ in range(3)),
          lambda q, k, v: (lambda keep: lambda: _torch_attention(q, k, v, keep))(_causal(q.shape[1], q.device))),
        W("attention_backward", "attention_backward",
          lambda r, s: tuple(_n(r, s["BH"], s["T"], s["D"]) for _ in range(3))
          + (np.abs(_n(r, s["BH"], s["T"], s["T"])) / np.float32(s["T"]), _n(r, s["BH"], s["T"], s["D"])),
          lambda q, k, v, p, do: lambda: _torch_attention_backward(q, k, v, p, do)),
        W("rmsnorm", "rmsnorm", lambda r, s: (_n(r, s["R"], s["C"]), _n(r, s["C"]), 1e-5),
          lambda x, w, eps: lambda: F.rms_norm(x, (x.shape[1],), w, eps)),
        W("rmsnorm_backward", "rmsnorm_backward",
          lambda r, s: (_n(r, s["R"], s["C"]), _n(r, s["C"]), np.abs(_n(r, s["R"])) + np.float32(0.5), _n(r, s["R"], s["C"])),
          lambda x, w, rstd, dy: lambda: _torch_rmsnorm_backward(x, w, rstd, dy)),
        W("cross_entropy", "cross_entropy", lambda r, s: (_n(r, s["NV"], s["V"], scale=4.0), r.integers(0, s["V"], s["NV"])),
          lambda l, t: lambda: F.cross_entropy(l, t)),
        W("cross_entropy_backward", "cross_entropy_backward",
          lambda r, s: (_n(r, s["NV"], s["V"], scale=4.0), r.integers(0, s["V"], s["NV"]), 1.0),
          lambda l, t, d: lambda: _torch_ce_backward(l, t)),
        W("embedding", "embedding", lambda r, s: (_n(r, s["EV"], s["C"]), r.integers(0, s["EV"], s["TOK"])),
          lambda tab, idx: lambda: F.embedding(idx, tab)),
        W("embedding_backward", "embedding_backward",
          lambda r, s: (r.integers(0, s["EV"], s["TOK"]), _n(r, s["TOK"], s["C"]), s["EV"]),
          lambda idx, d, v: lambda: torch.zeros(v, d.shape[1], device=d.device).index_add_(0, idx, d)),
        W("adamw", "adamw", lambda r, s: (_n(r, s["E"]), _n(r, s["E"]), _n(r, s["E"], scale=0.1),
                                          np.abs(_n(r, s["E"], scale=0.01))) + ad,
          lambda p, g, m, v, *h: lambda: _torch_adamw(p, g, m, v, *h)),
    ]  # fmt: skip


def make_inputs(w: Workload, size: str) -> tuple:
    """The numpy arguments of workload `w`, the same on every machine."""
    return w.make(np.random.default_rng([SEED, w.inputs]), SIZES[size])
