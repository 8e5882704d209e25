"""Benchmark of the `cpu` kernel backend against stock torch on the same CPU, in the same run.

    python benchmarks/kernel_bench.py [--rounds 20] [--matmul-rounds 15] [--only matmul,exp] [--products 1024,125m,11m]

The matmul family (matmul, matmul_nt, matmul_tn) is timed on three sides in
one run: the cpu backend in arithmetic version 1 (`acc + a * b`), in version 2
(`fma(a, b, acc)`), and torch.mm on the same operands, at 1024^3 in the three
layouts and at every product of one micro-batch row block (1024 tokens) of the
`125m` model, forward and backward, in the layout the engine calls it with.
The sides take turns round after round; each row prints the median of the
rounds in GFLOP/s (2*M*N*K per call) and each version's throughput over
torch.mm's. Fifteen rounds by default: with five, a row's ratio moved by about
3% from run to run on the 2-core VM (docs/benchmarks.md, 2026-12-06 afternoon). Targets: version 2 at least 0.9x torch.mm (issue 21), version 1
at least 0.4x.

Every other op is one row timing our kernel and its nearest torch equivalent
(shapes of a small GPT: rows 4096 x 128..512 columns, attention BH=32 T=128
D=32, vocabulary 256), interleaved, each side's fastest round kept, so a burst
of load from other processes hurts both alike; ratio = ours / torch (time),
target within 3x (ratio <= 3.0). The CPU model, its fma/avx2/avx512f flags
and the load average are printed first. Nothing here is a test: it prints figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

import kernels
from kernels import cpu

F32 = np.float32
OTHER_TARGET = 3.0
V2_TARGET = 0.9  # version 2's throughput over torch.mm's (issue 21)
V1_TARGET = 0.4  # version 1's (issue 5)


@dataclass(frozen=True)
class Case:
    """One benchmark row: our call, torch's call, and what counts as passing."""

    op: str
    shape: str
    ours: Callable[[], object]
    theirs: Callable[[], object]
    target: float


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


@dataclass(frozen=True)
class Product:
    """One product of the matmul family: C (M, N) folds K terms per output; `where` says what it computes."""

    op: str  # matmul (M,K)x(K,N), matmul_nt (M,K)x(N,K)T, matmul_tn (K,M)Tx(K,N)
    m: int
    k: int
    n: int
    group: str  # "1024", "125m" or "11m", for --products
    where: str

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def shape(self) -> str:
        m, k, n = self.m, self.k, self.n
        return {"matmul": f"({m},{k})x({k},{n})", "matmul_nt": f"({m},{k})x({n},{k})T",
                "matmul_tn": f"({k},{m})Tx({k},{n})"}[self.op]  # fmt: skip

    def operands(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """a and b in the layout `op` takes them."""
        a = _rand(rng, self.k, self.m) if self.op == "matmul_tn" else _rand(rng, self.m, self.k)
        b = _rand(rng, self.n, self.k) if self.op == "matmul_nt" else _rand(rng, self.k, self.n)
        return a, b

    def torch_call(self, a: np.ndarray, b: np.ndarray) -> Callable[[], object]:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        if self.op == "matmul_nt":
            return lambda: torch.mm(ta, tb.T)
        if self.op == "matmul_tn":
            return lambda: torch.mm(ta.T, tb)
        return lambda: torch.mm(ta, tb)


# The 125m model (C=768, F=4C=3072, V=50304) on 1024 rows (one sequence of 1024 tokens), as
# p2paudit/engine/model.py and backward.py call the products: weights are (in, out), the head (V, C).
_N, _C, _F, _V = 1024, 768, 3072, 50304
PRODUCTS = (
    Product("matmul", 1024, 1024, 1024, "1024", "square"),
    Product("matmul_nt", 1024, 1024, 1024, "1024", "square"),
    Product("matmul_tn", 1024, 1024, 1024, "1024", "square"),
    Product("matmul", _N, _C, _C, "125m", "attn q/k/v/proj forward"),
    Product("matmul", _N, _C, _F, "125m", "mlp.fc forward"),
    Product("matmul", _N, _F, _C, "125m", "mlp.proj forward"),
    Product("matmul_nt", _N, _C, _V, "125m", "logits forward"),
    Product("matmul_nt", _N, _C, _C, "125m", "attn dx"),
    Product("matmul_nt", _N, _C, _F, "125m", "mlp.proj dx"),
    Product("matmul_nt", _N, _F, _C, "125m", "mlp.fc dx"),
    Product("matmul_tn", _C, _N, _C, "125m", "attn dw"),
    Product("matmul_tn", _C, _N, _F, "125m", "mlp.fc dw"),
    Product("matmul_tn", _F, _N, _C, "125m", "mlp.proj dw"),
    Product("matmul_tn", _V, _N, _C, "125m", "head dw"),
    Product("matmul", _N, _V, _C, "125m", "head dx"),
    # The lab mode's 11m TinyLlama (benchmarks/lab_bench.py: C=256, SwiGLU F=1024, V=8192) on 1024 tokens, as
    # torch's linear and its backward call aten.mm (weights (out, in)): opt-in, `--products 11m`
    Product("matmul_nt", _N, 256, 256, "11m", "lab q/k/v/o forward"),
    Product("matmul_nt", _N, 256, 1024, "11m", "lab w1/w3 forward"),
    Product("matmul_nt", _N, 1024, 256, "11m", "lab w2 forward"),
    Product("matmul_nt", _N, 256, 8192, "11m", "lab head forward"),
    Product("matmul", _N, 256, 256, "11m", "lab q/k/v/o dx"),
    Product("matmul", _N, 1024, 256, "11m", "lab w1/w3 dx"),
    Product("matmul", _N, 256, 1024, "11m", "lab w2 dx"),
    Product("matmul", _N, 8192, 256, "11m", "lab head dx"),
    Product("matmul_tn", 256, _N, 256, "11m", "lab q/k/v/o dw"),
    Product("matmul_tn", 1024, _N, 256, "11m", "lab w1/w3 dw"),
    Product("matmul_tn", 256, _N, 1024, "11m", "lab w2 dw"),
    Product("matmul_tn", 8192, _N, 256, "11m", "lab head dw"),
)
DEFAULT_GROUPS = {"1024", "125m"}  # issue 21's products


def _time_sides(fns: list[Callable[[], object]], rounds: int, budget_s: float = 0.05) -> list[list[float]]:
    """Seconds per call of each fn, one figure per round; the fns take turns within every round."""
    reps = []
    for fn in fns:
        fn()  # warm-up (numba compilation or a cache load, torch's first MKL call)
        t0 = time.perf_counter()
        fn()
        reps.append(max(1, min(50, int(budget_s / max(time.perf_counter() - t0, 1e-6)))))
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for side, fn in enumerate(fns):
            t0 = time.perf_counter()
            for _ in range(reps[side]):
                fn()
            times[side].append((time.perf_counter() - t0) / reps[side])
    return times


def time_product(p: Product, rounds: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """Median GFLOP/s of (cpu v1, cpu v2, torch.mm) on p, interleaved over `rounds` rounds."""
    a, b = p.operands(rng)
    ours = getattr(cpu, p.op)
    fns = [lambda: ours(a, b), lambda: ours(a, b, fused=True), p.torch_call(a, b)]
    v1, v2, mm = (p.flops / statistics.median(t) / 1e9 for t in _time_sides(fns, rounds))
    return v1, v2, mm


def format_product(p: Product, v1: float, v2: float, mm: float) -> str:
    """One markdown row: op, shape, where, GFLOP/s of each side, each version over torch.mm, verdict."""
    verdict = "pass" if v2 >= V2_TARGET * mm else "FAIL"
    return (
        f"| {p.op} | {p.shape()} | {p.group} {p.where} | {v1:.1f} | {v2:.1f} | {mm:.1f} | "
        f"{v1 / mm:.2f}x | {v2 / mm:.2f}x | {verdict} |"
    )


def cpu_description() -> str:
    """The CPU model and whether it has fma, avx2 and avx512f (from /proc/cpuinfo where there is one)."""
    model, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model == "unknown":
                    model = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    have = " ".join(f"{flag}={'yes' if flag in flags else 'no'}" for flag in ("fma", "avx2", "avx512f"))
    return f"cpu: {model} ({os.cpu_count()} logical CPUs) {have}"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run_products(rounds: int, only: set[str], groups: set[str]) -> None:
    """Print the matmul family's table."""
    rng = np.random.default_rng(0)
    groups = groups or DEFAULT_GROUPS
    chosen = [p for p in PRODUCTS if (not only or p.op in only) and p.group in groups]
    if not chosen:
        return
    print(f"matmul family: median of {rounds} interleaved rounds; load average {load_average()}")
    print(f"| op | shape | product | cpu v1 GFLOP/s | cpu v2 GFLOP/s | torch.mm GFLOP/s | v1/mm | v2/mm "
          f"| v2 >= {V2_TARGET}x |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for p in chosen:
        print(format_product(p, *time_product(p, rounds, rng)), flush=True)
    print(f"load average after the matmul family: {load_average()}")


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


def _long_attention_cases(rng: np.random.Generator) -> list[Case]:
    """The 125m shape's heads (12 x T 1,024 x D 64), arithmetic version 2, against torch's fused SDPA (flash
    attention on cpu), forward and forward + backward (torch keeps no P; ours keeps it for the backward)."""
    bh, t, d = 12, 1024, 64
    q, k, v, do = (_rand(rng, bh, t, d) for _ in range(4))
    cpu2 = kernels.get_backend("cpu", 2)
    _, p = cpu2.attention(q, k, v)
    tq, tk, tv = (torch.from_numpy(a).view(1, bh, t, d).requires_grad_() for a in (q, k, v))
    tdo = torch.from_numpy(do).view(1, bh, t, d)

    def sdpa():
        with torch.no_grad():
            return F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)

    def sdpa_both():
        F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(tdo)

    def ours_both():
        cpu2.attention(q, k, v)
        return cpu2.attention_backward(q, k, v, p, do)

    shape = f"BH={bh} T={t} D={d} v2 vs SDPA"
    return [
        Case("attention", shape, lambda: cpu2.attention(q, k, v), sdpa, OTHER_TARGET),
        Case("attention_fwd_bwd", shape, ours_both, sdpa_both, OTHER_TARGET),
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
    builders = (_elementwise_cases, _reduction_cases, _attention_cases, _long_attention_cases, _norm_loss_cases,
                _embedding_adamw_cases)  # fmt: skip
    return [case for build in builders for case in build(rng)]


def format_row(case: Case, ours: float, theirs: float) -> str:
    """One markdown table row: op, shape, ms, ratio, target, verdict."""
    ratio = ours / theirs
    shape = case.shape
    verdict = "pass" if ratio <= case.target else "FAIL"
    return f"| {case.op} | {shape} | {ours * 1e3:.3f} | {theirs * 1e3:.3f} | {ratio:.2f} | <= {case.target:.1f} | {verdict} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="interleaved timing rounds per row (fastest kept)")
    parser.add_argument(
        "--matmul-rounds", type=int, default=15, help="interleaved rounds per product (median kept; 5 until 2026-12-06)"
    )
    parser.add_argument("--only", default="", help="comma-separated op names to run (default: all)")
    parser.add_argument(
        "--products", default="", help="matmul family groups to run: 1024,125m,11m (default: 1024,125m)"
    )
    args = parser.parse_args()
    only = {o.strip() for o in args.only.split(",") if o.strip()}
    groups = {g.strip() for g in args.products.split(",") if g.strip()}
    print(cpu_description())
    print(
        f"torch {torch.__version__} threads={torch.get_num_threads()} capability={torch.backends.cpu.get_cpu_capability()}"
    )
    import numba

    print(f"numba {numba.__version__} threads={numba.get_num_threads()} layer={numba.config.THREADING_LAYER}")
    run_products(args.matmul_rounds, only, groups)
    cases = [c for c in build_cases(np.random.default_rng(0)) if not only or c.op.split()[0] in only]
    if not cases:
        return
    print(f"other ops: fastest of {args.rounds} interleaved rounds; load average {load_average()}")
    print("| op | shape | ours ms | torch ms | ratio | target | result |")
    print("|---|---|---|---|---|---|---|")
    for case in cases:
        ours, theirs = _time_pair(case, args.rounds)
        print(format_row(case, ours, theirs), flush=True)


if __name__ == "__main__":
    main()
