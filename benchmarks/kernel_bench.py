"""Benchmark of the `cpu` kernel backend against stock torch on the same CPU, in the same run.

    python benchmarks/kernel_bench.py [--rounds 7] [--only matmul,exp]

Each row times one of our kernels and its nearest torch equivalent on the
same inputs (shapes of a small GPT: rows 4096 x 128..512 columns, attention
BH=32 T=128 D=32, vocabulary 256). Timings interleave ours and torch's, round
after round, and keep each side's fastest round, so a burst of load from
other processes hurts both alike. The ratio is ours / torch (time); targets:
matmul forms at least 0.4x torch's throughput (ratio <= 2.5), everything
else within 3x (ratio <= 3.0). Nothing here is a test: it prints figures.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from kernels import cpu

F32 = np.float32
MATMUL_TARGET = 2.5  # time ratio; = 0.4x torch's throughput
OTHER_TARGET = 3.0


@dataclass(frozen=True)
class Case:
    """One benchmark row: our call, torch's call, and what counts as passing."""

    op: str
    shape: str
    ours: Callable[[], object]
    theirs: Callable[[], object]
    target: float
    flops: float = 0.0  # for matmul rows: 2*M*N*K (per batch element, times BH)


def _time_pair(case: Case, rounds: int, budget_s: float = 0.02) -> tuple[float, float]:
    """Fastest seconds per call of (ours, theirs), interleaved over `rounds` rounds."""
    case.ours()
    case.theirs()  # warm-up (and numba compilation, or a cache load)
    t0 = time.perf_counter()
    case.ours()
    reps = max(1, min(50, int(budget_s / max(time.perf_counter() - t0, 1e-6))))
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for side, fn in enumerate((case.ours, case.theirs)):
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            best[side] = min(best[side], (time.perf_counter() - t0) / reps)
    return best[0], best[1]


def _rand(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(F32)


def _matmul_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for n in (512, 1024):
        a, b = _rand(rng, n, n), _rand(rng, n, n)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        cases.append(Case("matmul", f"{n}x{n}x{n}", lambda a=a, b=b: cpu.matmul(a, b),
                          lambda ta=ta, tb=tb: torch.mm(ta, tb), MATMUL_TARGET, 2.0 * n**3))  # fmt: skip
    x, w, dy = _rand(rng, 4096, 128), _rand(rng, 512, 128), _rand(rng, 4096, 512)
    tx, tw, tdy = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(dy)
    fl = 2.0 * 4096 * 128 * 512
    cases += [
        Case("matmul_nt", "(4096,128)x(512,128)T", lambda: cpu.matmul_nt(x, w), lambda: tx @ tw.T, MATMUL_TARGET, fl),
        Case("matmul", "(4096,512)x(512,128)", lambda: cpu.matmul(dy, w), lambda: tdy @ tw, MATMUL_TARGET, fl),
        Case(
            "matmul_tn", "(4096,512)Tx(4096,128)", lambda: cpu.matmul_tn(dy, x), lambda: tdy.T @ tx, MATMUL_TARGET, fl
        ),
    ]
    q, k = _rand(rng, 32, 128, 32), _rand(rng, 32, 128, 32)
    tq, tk = torch.from_numpy(q), torch.from_numpy(k)
    cases.append(Case("matmul_nt", "batched (32,128,32)x(32,128,32)T", lambda: cpu.matmul_nt(q, k),
                      lambda: torch.matmul(tq, tk.transpose(1, 2)), MATMUL_TARGET, 2.0 * 32 * 128 * 128 * 32))  # fmt: skip
    return cases


def _elementwise_cases(rng: np.random.Generator) -> list[Case]:
    x, dy = _rand(rng, 4096, 512, scale=3.0), _rand(rng, 4096, 512)
    pos = np.abs(x) + F32(1e-3)
    tx, tdy, tpos = torch.from_numpy(x), torch.from_numpy(dy), torch.from_numpy(pos)
    shape = "(4096,512)"
    return [
        Case("exp", shape, lambda: cpu.exp(x), lambda: torch.exp(tx), OTHER_TARGET),
        Case("log", shape, lambda: cpu.log(pos), lambda: torch.log(tpos), OTHER_TARGET),
        Case("silu", shape, lambda: cpu.silu(x), lambda: F.silu(tx), OTHER_TARGET),
        Case(
            "silu_backward",
            shape,
            lambda: cpu.silu_backward(x, dy),
            lambda: torch.ops.aten.silu_backward(tdy, tx),
            OTHER_TARGET,
        ),  # fmt: skip
    ]


def _reduction_cases(rng: np.random.Generator) -> list[Case]:
    x = _rand(rng, 4096, 512)
    tx = torch.from_numpy(x)
    return [
        Case("sum_rows", "(4096,512)", lambda: cpu.sum_rows(x), lambda: torch.sum(tx, 1), OTHER_TARGET),
        Case("sum_cols", "(4096,512)", lambda: cpu.sum_cols(x), lambda: torch.sum(tx, 0), OTHER_TARGET),
        Case("max_rows", "(4096,512)", lambda: cpu.max_rows(x), lambda: torch.amax(tx, 1), OTHER_TARGET),
    ]


def _attention_cases(rng: np.random.Generator) -> list[Case]:
    bh, t, d = 32, 128, 32
    q, k, v, do = (_rand(rng, bh, t, d) for _ in range(4))
    s = _rand(rng, bh, t, t, scale=2.0)
    tq, tk, tv, tdo, ts = (torch.from_numpy(a) for a in (q, k, v, do, s))
    masked = torch.ones(t, t, dtype=torch.bool).triu(1)  # (T, T) True where j > t
    scale = 1.0 / float(np.sqrt(d))
    _, p = cpu.attention(q, k, v)
    dp = _rand(rng, bh, t, t)
    tp, tdp = torch.from_numpy(p), torch.from_numpy(dp)

    def torch_attention():
        sc = torch.matmul(tq, tk.transpose(1, 2)) * scale  # (BH, T, T)
        pr = torch.softmax(sc.masked_fill(masked, float("-inf")), -1)
        return torch.matmul(pr, tv), pr

    def torch_attention_backward():
        dpp = torch.matmul(tdo, tv.transpose(1, 2))  # (BH, T, T)
        dv = torch.matmul(tp.transpose(1, 2), tdo)
        ds = torch._softmax_backward_data(dpp, tp, -1, torch.float32)
        return torch.matmul(ds, tk) * scale, torch.matmul(ds.transpose(1, 2), tq) * scale, dv

    shape = f"BH={bh} T={t} D={d}"
    return [
        Case(
            "softmax_causal",
            f"({bh},{t},{t})",
            lambda: cpu.softmax_causal(s),
            lambda: torch.softmax(ts.masked_fill(masked, float("-inf")), -1),
            OTHER_TARGET,
        ),  # fmt: skip
        Case(
            "softmax_causal_backward",
            f"({bh},{t},{t})",
            lambda: cpu.softmax_causal_backward(p, dp),
            lambda: torch._softmax_backward_data(tdp, tp, -1, torch.float32),
            OTHER_TARGET,
        ),  # fmt: skip
        Case("attention", shape, lambda: cpu.attention(q, k, v), torch_attention, OTHER_TARGET),
        Case(
            "attention_backward",
            shape,
            lambda: cpu.attention_backward(q, k, v, p, do),
            torch_attention_backward,
            OTHER_TARGET,
        ),  # fmt: skip
    ]


def _norm_loss_cases(rng: np.random.Generator) -> list[Case]:
    cases = []
    for c in (128, 512):
        x, w, dy = _rand(rng, 4096, c), _rand(rng, c), _rand(rng, 4096, c)
        _, rstd = cpu.rmsnorm(x, w, 1e-5)
        tx = torch.from_numpy(x).requires_grad_()
        tw = torch.from_numpy(w).requires_grad_()
        ty = F.rms_norm(tx, (c,), tw, 1e-5)
        tdy = torch.from_numpy(dy)
        cases += [
            Case("rmsnorm", f"(4096,{c})", lambda x=x, w=w: cpu.rmsnorm(x, w, 1e-5),
                 lambda tx=tx, tw=tw, c=c: F.rms_norm(tx.detach(), (c,), tw.detach(), 1e-5), OTHER_TARGET),
            Case("rmsnorm_backward", f"(4096,{c})", lambda x=x, w=w, r=rstd, dy=dy: cpu.rmsnorm_backward(x, w, r, dy),
                 lambda ty=ty, tx=tx, tw=tw, tdy=tdy: torch.autograd.grad(ty, (tx, tw), tdy, retain_graph=True),
                 OTHER_TARGET),
        ]  # fmt: skip
    logits = _rand(rng, 4096, 256, scale=2.0)
    targets = rng.integers(0, 256, 4096)
    tl, tt = torch.from_numpy(logits), torch.from_numpy(targets)

    def torch_ce():
        lg = tl.detach().requires_grad_()
        loss = F.cross_entropy(lg, tt)
        return torch.autograd.grad(loss, lg)

    def ours_ce():
        return cpu.cross_entropy(logits, targets), cpu.cross_entropy_backward(logits, targets, 1.0)

    cases.append(Case("cross_entropy fwd+bwd", "(4096,256)", ours_ce, torch_ce, OTHER_TARGET))
    return cases


def _embedding_adamw_cases(rng: np.random.Generator) -> list[Case]:
    table, dout = _rand(rng, 256, 512), _rand(rng, 4096, 512)
    idx = rng.integers(0, 256, 4096)
    tt, ti, tdo = torch.from_numpy(table), torch.from_numpy(idx), torch.from_numpy(dout)
    p, g, m = _rand(rng, 1024, 1024), _rand(rng, 1024, 1024), _rand(rng, 1024, 1024, scale=0.1)
    v = np.abs(_rand(rng, 1024, 1024, scale=0.01))
    tp = torch.nn.Parameter(torch.from_numpy(p.copy()))
    tp.grad = torch.from_numpy(g)
    opt = torch.optim.AdamW([tp], lr=3e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    opt.step()  # creates the moments
    return [
        Case("embedding", "V=256 C=512 N=4096", lambda: cpu.embedding(table, idx), lambda: F.embedding(ti, tt),
             OTHER_TARGET),
        Case("embedding_backward", "V=256 C=512 N=4096", lambda: cpu.embedding_backward(idx, dout, 256),
             lambda: torch.zeros(256, 512).index_add_(0, ti, tdo), OTHER_TARGET),
        Case("adamw", "(1024,1024)", lambda: cpu.adamw(p, g, m, v, 10, 3e-4, 0.9, 0.95, 1e-8, 0.1), opt.step,
             OTHER_TARGET),
    ]  # fmt: skip


def build_cases(rng: np.random.Generator) -> list[Case]:
    """Every benchmark row, in print order."""
    builders = (_matmul_cases, _elementwise_cases, _reduction_cases, _attention_cases, _norm_loss_cases,
                _embedding_adamw_cases)  # fmt: skip
    return [case for build in builders for case in build(rng)]


def format_row(case: Case, ours: float, theirs: float) -> str:
    """One markdown table row: op, shape, ms, ratio, target, verdict (GFLOP/s for matmuls)."""
    ratio = ours / theirs
    shape = case.shape
    if case.flops:
        shape += f" [{case.flops / ours / 1e9:.1f} vs {case.flops / theirs / 1e9:.1f} GFLOP/s]"
    verdict = "pass" if ratio <= case.target else "FAIL"
    return f"| {case.op} | {shape} | {ours * 1e3:.3f} | {theirs * 1e3:.3f} | {ratio:.2f} | <= {case.target:.1f} | {verdict} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="interleaved timing rounds per row (fastest kept)")
    parser.add_argument("--only", default="", help="comma-separated op names to run (default: all)")
    args = parser.parse_args()
    only = {o.strip() for o in args.only.split(",") if o.strip()}
    print(
        f"torch {torch.__version__} threads={torch.get_num_threads()} capability={torch.backends.cpu.get_cpu_capability()}"
    )
    import numba

    print(f"numba {numba.__version__} threads={numba.get_num_threads()} layer={numba.config.THREADING_LAYER}")
    print("| op | shape | ours ms | torch ms | ratio | target | result |")
    print("|---|---|---|---|---|---|---|")
    for case in build_cases(np.random.default_rng(0)):
        if only and case.op.split()[0] not in only:
            continue
        ours, theirs = _time_pair(case, args.rounds)
        print(format_row(case, ours, theirs), flush=True)


if __name__ == "__main__":
    main()
