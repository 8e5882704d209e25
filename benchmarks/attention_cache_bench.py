"""What the lab mode's attention cache saves: a lab step keeping every attention's p for its backward against
the same step keeping none (P2PAUDIT_LAB_ATTENTION_CACHE=0: each backward recomputes p, the same bits).

Two runs of benchmarks/lab_bench.py's TinyLlama at `--size` (and `--seq`) train the same batches under the
mode, taking turns a step at a time; the first step is the warm-up. Printed: each way's median step time,
and whether their last states are equal (they must be).

    PYTHONPATH=. python benchmarks/attention_cache_bench.py --size 125m --steps 4
    PYTHONPATH=. python benchmarks/attention_cache_bench.py --size 11m --seq 4096 --steps 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from benchmarks.lab_bench import SIZES, cpu_name
from p2paudit.lab import LabRun
from p2paudit.lab.context import ATTENTION_CACHE_ENV
from tests.lab import models

WAYS = {"every p kept": "1T", "none kept": "0"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="11m")
    ap.add_argument("--seq", type=int, default=None, help="T, the sequence length (default: the size's)")
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per step (B = tokens / T, at least 1)")
    ap.add_argument("--steps", type=int, default=5, help="steps per way, the first a warm-up")
    args = ap.parse_args()
    vocab, c, heads, layers, t = SIZES[args.size]
    t = args.seq or t
    b = max(1, args.tokens // t)
    data = models.batches(args.steps, b=b, t=t, vocab=vocab)
    runs = {}
    for way in WAYS:
        model, opt = models.make(vocab=vocab, c=c, heads=heads, layers=layers)
        runs[way] = (LabRun(model, opt, backend="cpu"), model, opt)
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    for i, tokens in enumerate(data):
        for way, (run, model, opt) in runs.items():
            os.environ[ATTENTION_CACHE_ENV] = WAYS[way]  # read as the step's mode is made
            t0 = time.perf_counter()
            with run.step(i):
                models.train_step(model, opt, tokens)
            if i:
                times[way].append(time.perf_counter() - t0)
    states = {runs[way][0].records[-1].state.digest for way in WAYS}
    print(f"cpu: {cpu_name()}; model {args.size}, B={b} T={t}, {args.steps - 1} timed steps a way")
    for way, ts in times.items():
        print(f"  {way:13s} median {statistics.median(ts):.3f} s  ({', '.join(f'{x:.3f}' for x in ts)})")
    print(f"  last states equal: {len(states) == 1}")


if __name__ == "__main__":
    main()
