"""Peak memory of a lab's step under the strict canonical mode against the same step in stock torch.

Each side runs in a process of its own (the peak resident size, ru_maxrss, is a process's whole life): it
builds benchmarks/lab_bench.py's TinyLlama at `--size`, notes its peak so far (model, optimiser,
batches, the imports), then trains `--steps` steps (AdamW's moments are made by the first) and notes its
peak again. Printed per side: both peaks and their difference, the memory the steps themselves took; and
the ratio of the two sides' differences and totals. Unset, P2PAUDIT_LAB_ATTENTION_CACHE lets the mode
choose whether an attention keeps its probabilities p for the backward (p2paudit/lab/context.py: on
cpu none where the heads keep the threads busy); a size keeps them up to it ("1T": every one).

    PYTHONPATH=. python benchmarks/lab_memory_bench.py --size 125m --tokens 1024
    PYTHONPATH=. python benchmarks/lab_memory_bench.py --size 11m --seq 4096 --tokens 4096
    PYTHONPATH=. P2PAUDIT_LAB_ATTENTION_CACHE=1T python benchmarks/lab_memory_bench.py --size 11m --seq 4096 --tokens 4096
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

from benchmarks.lab_bench import SIZES, cpu_name
from p2paudit.lab import LabRun
from tests.lab import models

GIB = 1 << 30


def _peak() -> int:
    """This process's peak resident size so far, in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _side(side: str, size: str, tokens: int, seq: int | None, steps: int) -> None:
    """One side, in this process: print its peaks as JSON."""
    vocab, c, heads, layers, t = SIZES[size]
    t = seq or t
    b = max(1, tokens // t)
    data = models.batches(steps, b=b, t=t, vocab=vocab)
    model, opt = models.make(vocab=vocab, c=c, heads=heads, layers=layers)
    run = LabRun(model, opt, backend="cpu") if side == "mode" else None
    built = _peak()
    for i, batch in enumerate(data):
        if run is None:
            models.train_step(model, opt, batch)
        else:
            with run.step(i):
                models.train_step(model, opt, batch)
    print(json.dumps({"built": built, "peak": _peak(), "b": b, "t": t}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="11m")
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per step (B = tokens / T)")
    ap.add_argument("--seq", type=int, default=None, help="T, the sequence length (default: the size's)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--side", choices=("mode", "stock"), help="run one side here (what the parent starts)")
    args = ap.parse_args()
    if args.side:
        _side(args.side, args.size, args.tokens, args.seq, args.steps)
        return
    root = Path(__file__).resolve().parents[1]
    got = {}
    for side in ("stock", "mode"):
        command = [sys.executable, str(Path(__file__).resolve()), "--side", side, "--size", args.size]
        command += ["--tokens", str(args.tokens), "--steps", str(args.steps)]
        command += ["--seq", str(args.seq)] if args.seq else []
        out = subprocess.run(command, cwd=root, capture_output=True, text=True, check=True)
        got[side] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"cpu: {cpu_name()}; model {args.size}, B={got['mode']['b']} T={got['mode']['t']}, {args.steps} steps")
    for side in ("stock", "mode"):
        built, peak = got[side]["built"] / GIB, got[side]["peak"] / GIB
        print(f"  {side:6s} built {built:6.2f} GiB  peak {peak:6.2f} GiB  steps took {peak - built:6.2f} GiB")
    took = {s: got[s]["peak"] - got[s]["built"] for s in got}
    print(f"  ratio (mode / stock): steps' memory {took['mode'] / took['stock']:.2f}x, "
          f"peak {got['mode']['peak'] / got['stock']['peak']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
