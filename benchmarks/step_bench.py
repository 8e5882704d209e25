"""One training step: the deterministic engine (cpu backend) against stock PyTorch on the same model.

Both sides run the same configuration: M micro-batches of B sequences of T
tokens, gradient accumulation, AdamW. PyTorch uses float32 autograd,
F.scaled_dot_product_attention, F.rms_norm and torch.optim.AdamW with its
default thread count. Each side runs one warm-up step (numba compiles on its
first call), then `--repeats` timed steps, the two sides taking turns so that
a change in machine load hits both; min and median are reported, and their ratios.

    python benchmarks/step_bench.py --configs tiny small --repeats 3 [--arithmetic 1|2]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

import kernels
from p2paudit.engine.config import TrainConfig, train_config
from p2paudit.engine.model import NORM_EPS
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import count_params, init_state, param_shapes
from p2paudit.engine.step import train_step


def torch_params(state: dict[str, np.ndarray], cfg: TrainConfig) -> dict[str, torch.Tensor]:
    return {n: torch.tensor(state["params/" + n], requires_grad=True) for n in param_shapes(cfg.model)}


def torch_loss(p: dict[str, torch.Tensor], tokens: torch.Tensor, cfg: TrainConfig) -> torch.Tensor:
    """The engine's model in ordinary float32 PyTorch."""
    m = cfg.model
    B, T, H, C = tokens.shape[0], m.seq_len, m.n_head, m.n_embd
    idx, tgt = tokens[:, :-1], tokens[:, 1:]
    x = p["wte"][idx] + p["wpe"]  # (B, T, C)
    for layer in range(m.n_layer):
        pre = f"h.{layer}."
        a = F.rms_norm(x, (C,), p[pre + "ln1"], float(NORM_EPS))
        q, k, v = ((a @ p[pre + "attn." + n]).view(B, T, H, C // H).transpose(1, 2) for n in ("wq", "wk", "wv"))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + o @ p[pre + "attn.wo"]
        h = F.rms_norm(x, (C,), p[pre + "ln2"], float(NORM_EPS)) @ p[pre + "mlp.w_fc"]
        x = x + F.silu(h) @ p[pre + "mlp.w_proj"]
    head = p["wte"] if m.tied_head else p["lm_head"]
    logits = F.rms_norm(x, (C,), p["ln_f"], float(NORM_EPS)) @ head.T
    return F.cross_entropy(logits.reshape(B * T, -1), tgt.reshape(-1))


def torch_stepper(cfg: TrainConfig) -> Callable[[np.ndarray], None]:
    """A function that runs one stock PyTorch step (accumulating M micro-batches, then AdamW)."""
    p = torch_params(init_state(cfg), cfg)
    o = cfg.optim
    opt = torch.optim.AdamW(p.values(), lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay)

    def step(batch: np.ndarray) -> None:
        tokens = torch.from_numpy(batch)
        opt.zero_grad(set_to_none=True)
        for mb in range(cfg.micro_batches):
            (torch_loss(p, tokens[mb], cfg) / cfg.micro_batches).backward()
        opt.step()

    return step


def engine_stepper(cfg: TrainConfig, backend_name: str, arithmetic: int = 1) -> Callable[[np.ndarray], None]:
    """A function that runs one engine step at arithmetic version `arithmetic`, keeping the state between calls."""
    backend = kernels.get_backend(backend_name, arithmetic)
    holder = {"state": init_state(cfg)}

    def step(batch: np.ndarray) -> None:
        holder["state"] = train_step(holder["state"], batch, cfg, backend).state

    return step


def time_alternating(steppers: list[Callable[[np.ndarray], None]], batches: list[np.ndarray]) -> list[list[float]]:
    """Seconds per step of each stepper; they take turns, so a change in machine load hits both alike.

    batches[0] is a warm-up step for every stepper (numba compiles on first use) and is not timed.
    """
    times: list[list[float]] = [[] for _ in steppers]
    for i, batch in enumerate(batches):
        for k, step in enumerate(steppers):
            t0 = time.perf_counter()
            step(batch)
            if i:
                times[k].append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=["tiny", "small"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--arithmetic", type=int, choices=(1, 2), default=kernels.ARITHMETIC_VERSION)
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, torch threads {torch.get_num_threads()}")
    with open(np.__file__, "rb") as f:
        tokens = np.frombuffer(f.read() * 20, dtype=np.uint8)
    for name in args.configs:
        cfg = train_config(name)
        m = cfg.model
        batches = [batch_for_step(tokens, b"bench", cfg, n) for n in range(args.repeats + 1)]
        ours, ref = time_alternating([engine_stepper(cfg, args.backend, args.arithmetic), torch_stepper(cfg)], batches)
        print(
            f"{name}: {count_params(m) / 1e6:.2f} M params, M={cfg.micro_batches} B={cfg.batch_size} T={m.seq_len}, "
            f"{args.repeats} steps each: engine[{args.backend} v{args.arithmetic}] min {min(ours) * 1e3:.1f} / median "
            f"{statistics.median(ours) * 1e3:.1f} ms, torch min {min(ref) * 1e3:.1f} / median "
            f"{statistics.median(ref) * 1e3:.1f} ms; ratio engine/torch {min(ours) / min(ref):.2f}x (min), "
            f"{statistics.median(ours) / statistics.median(ref):.2f}x (median)"
        )


if __name__ == "__main__":
    main()
