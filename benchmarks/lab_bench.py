"""A lab's Llama-style step under the strict canonical mode (p2paudit.lab) against the same step in stock torch.

The model is tests/lab/models.TinyLlama at a chosen size (hand-written RMSNorm, RoPE, causal SDPA,
SwiGLU, untied head; cross_entropy, clip_grad_norm_, AdamW(fused=True)). One warm-up step per side
(numba compiles on its first call), then `--repeats` timed steps, the sides taking turns so that a
change in machine load hits both; min and median and their ratio. The mode's time is split into the
ops it ran: `--profile` prints the `--top` (10) entries that took longest (Python overhead included).

    python benchmarks/lab_bench.py --size 11m --tokens 1024 --repeats 3
    python benchmarks/lab_bench.py --size 125m --tokens 1024 --repeats 1

It first prints the per-op overhead: 5,000 `x + y` on 8-element tensors, stock and under the mode (less
sensitive to the machine's load than a whole step).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import time
from collections import defaultdict

import torch

import kernels
from p2paudit.lab import LabRun
from p2paudit.lab import mode as lab_mode
from tests.lab import models

SIZES = {  # name -> (vocab, C, heads, layers, T by default)
    "tiny": (256, 64, 4, 2, 64),
    "11m": (8192, 256, 8, 6, 256),
    # the engine's `125m` shape (p2paudit/engine/config.py: V 50304, C 768, 12 heads, 12 layers, T 1024) in
    # TinyLlama's blocks (SwiGLU 4C, untied head): 190M parameters, one sequence of 1,024 tokens
    "125m": (50304, 768, 12, 12, 1024),
}


def cpu_name() -> str:
    """The processor's model name (Linux), else what platform says."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _faults() -> int:
    """Page faults of this process so far (minor and major)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt + usage.ru_majflt


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def profile_entries() -> dict[str, list[float]]:
    """Wrap every TABLE entry to time it; returns the per-op times it collects."""
    times: dict[str, list[float]] = defaultdict(list)
    for name, entry in list(lab_mode.TABLE.items()):

        def timed(ctx, n, a, entry=entry, name=name):  # noqa: ANN001, ANN202
            t0 = time.perf_counter()
            try:
                return entry(ctx, n, a)
            finally:
                times[name].append(time.perf_counter() - t0)

        lab_mode.TABLE[name] = timed
    return times


def per_op_overhead(n: int = 5000) -> tuple[float, float]:
    """Seconds per op of `x + y` on 8-element tensors: stock torch, then under the mode (cpu backend, a trace kept)."""
    x, y = torch.ones(8), torch.ones(8)
    t0 = time.perf_counter()
    for _ in range(n):
        x + y
    stock = (time.perf_counter() - t0) / n
    mode = lab_mode.CanonicalMode(kernels.get_backend("cpu", kernels.ARITHMETIC_VERSION))
    with mode:
        x + y  # the first call caches the op's schema
        t0 = time.perf_counter()
        for _ in range(n):
            x + y
        lab = (time.perf_counter() - t0) / n
    return stock, lab


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="11m")
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per step (B = tokens / T)")
    ap.add_argument("--seq", type=int, default=None, help="T, the sequence length (default: the size's)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=10, help="entries listed by --profile")
    ap.add_argument("--arithmetic", type=int, choices=(1, 2), default=None, help="default: kernels.ARITHMETIC_VERSION")
    args = ap.parse_args()
    vocab, c, heads, layers, seq = SIZES[args.size]
    t = args.seq or seq
    b = max(1, args.tokens // t)
    stock_op, lab_op = per_op_overhead()
    print(f"per-op overhead (x + y, 8 floats): stock torch {stock_op * 1e6:.1f} us, lab mode {lab_op * 1e6:.1f} us")
    data = models.batches(args.repeats + 1, b=b, t=t, vocab=vocab)
    lab_model, lab_opt = models.make(vocab=vocab, c=c, heads=heads, layers=layers)
    stock_model, stock_opt = models.make(vocab=vocab, c=c, heads=heads, layers=layers)
    run = LabRun(lab_model, lab_opt, backend="cpu", arithmetic=args.arithmetic)
    print(f"lab mode: cpu backend, arithmetic {run.arithmetic}")
    times = profile_entries() if args.profile else None
    lab_t, stock_t, lab_cpu, stock_cpu, lab_exit = [], [], [], [], []
    lab_faults: list[int] = []
    stock_faults: list[int] = []
    load_before = os.getloadavg()
    for i, tokens in enumerate(data):
        f0, t0, c0 = _faults(), time.perf_counter(), time.process_time()
        with run.step(i):
            models.train_step(lab_model, lab_opt, tokens)
            body_end = time.perf_counter()
        f1, t1, c1 = _faults(), time.perf_counter(), time.process_time()
        models.train_step(stock_model, stock_opt, tokens)
        f2, t2, c2 = _faults(), time.perf_counter(), time.process_time()
        if i:  # step 0 is the warm-up
            lab_t.append(t1 - t0)
            lab_exit.append(t1 - body_end)  # the step's exit: its state digest and record
            stock_t.append(t2 - t1)
            lab_cpu.append(c1 - c0)
            stock_cpu.append(c2 - c1)
            lab_faults.append(f1 - f0)
            stock_faults.append(f2 - f1)
        elif times is not None:
            times.clear()  # the warm-up's compiles are not the entries' time
    print(f"cpu: {cpu_name()}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"load average (1, 5, 15 min) before the steps {load_before}, after {os.getloadavg()}")
    print(f"model {args.size}: {count(lab_model) / 1e6:.1f}M params, B={b} T={t} ({b * t} tokens/step)")
    for label, ts in (("lab mode", lab_t), ("stock torch", stock_t)):
        print(f"  {label:12s} min {min(ts):.3f} s  median {statistics.median(ts):.3f} s")
    print(
        f"  of the lab step, its exit (the state digest and the step's record): median {statistics.median(lab_exit):.3f} s"
    )
    print(f"  ratio (lab / stock): min {min(lab_t) / min(stock_t):.2f}x  median "
          f"{statistics.median(lab_t) / statistics.median(stock_t):.2f}x")  # fmt: skip
    # CPU seconds (all threads of the process) move less with the other users' load than wall time does
    print(f"  cpu time per step, median: lab {statistics.median(lab_cpu):.3f} s, stock {statistics.median(stock_cpu):.3f} s "
          f"({statistics.median(lab_cpu) / statistics.median(stock_cpu):.2f}x)")  # fmt: skip
    # a page's first touch (a fresh array's memory) costs a fault: a sign of memory the heap did not reuse
    print(f"  page faults per step, median: lab {statistics.median(lab_faults):.0f}, "
          f"stock {statistics.median(stock_faults):.0f}")  # fmt: skip
    if times is not None:
        total = sum(sum(v) for v in times.values())
        print(f"  table entries: {total:.3f} s over {len(data) - 1} timed steps")
        for name, v in sorted(times.items(), key=lambda kv: -sum(kv[1]))[: args.top]:
            print(f"    {name:70s} {sum(v):7.3f} s  {len(v):5d} calls")


if __name__ == "__main__":
    main()
