"""A tiny training step on the reference backend in both arithmetic versions, against a baseline checkout.

The suite trains and replays many tiny runs on the reference backend, so the
speed of its folds (kernels/reference.py, kernels/exact_fma.fused_fold) is the
suite's speed. Each case (backend, arithmetic version) runs one warm-up step
and then `--steps` timed steps in a fresh process; with `--baseline DIR` (another
checkout of p2paudit, for example `git worktree add /tmp/base HEAD~1`) the same
cases run in that tree too, the two trees taking turns round after round, so a
change in machine load hits both. Reported: the median per-step time of each
case in each tree (process CPU time, which a shared machine disturbs less than
wall time; the reference backend runs on one thread; wall time beside it), the
ratio version 2 / version 1 in each tree, and the ratio this tree / baseline
per case.

    python benchmarks/reference_step_bench.py --baseline /tmp/base --rounds 3 --steps 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
CASES = (("reference", 1), ("reference", 2))


def child(steps: int, cases: list[tuple[str, int]]) -> None:
    """Time `steps` tiny steps per case (after one warm-up step); print {"backend/version": [[cpu s, wall s]]}."""
    import numpy as np

    import kernels
    from p2paudit.engine.config import train_config
    from p2paudit.engine.schedule import batch_for_step
    from p2paudit.engine.state import init_state
    from p2paudit.engine.step import train_step

    cfg = train_config("tiny")
    tokens = np.frombuffer(bytes(range(256)) * 512, dtype=np.uint8)
    batches = [batch_for_step(tokens, b"bench", cfg, n) for n in range(steps + 1)]
    out: dict[str, list[tuple[float, float]]] = {}
    for name, version in cases:
        backend = kernels.get_backend(name, version)
        state = init_state(cfg)
        times = []
        for i, batch in enumerate(batches):
            c0, t0 = time.process_time(), time.perf_counter()
            state = train_step(state, batch, cfg, backend).state
            if i:
                times.append((time.process_time() - c0, time.perf_counter() - t0))
        out[f"{name}/v{version}"] = times
    print(json.dumps(out))


def run_tree(tree: Path, steps: int, cases: list[tuple[str, int]]) -> dict[str, list[list[float]]]:
    """One round: this script's child mode in a fresh process importing the code of `tree`."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    spec = ",".join(f"{n}:{v}" for n, v in cases)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--steps", str(steps), "--cases", spec]
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
    result: dict[str, list[list[float]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="another p2paudit checkout to time the same cases in")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per case per round")
    ap.add_argument("--cases", default=",".join(f"{n}:{v}" for n, v in CASES), help="backend:version,...")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases.split(",")]
    if args.child:
        child(args.steps, cases)
        return
    trees = {"this tree": HERE} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    times: dict[str, dict[str, list[list[float]]]] = {t: {} for t in trees}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            for case, ts in run_tree(tree, args.steps, cases).items():
                times[label].setdefault(case, []).extend(ts)
    print(f"tiny step, {args.rounds} rounds x {args.steps} steps per case, load average {os.getloadavg()[0]:.1f}")
    med = {t: {c: statistics.median(cpu for cpu, _ in ts) for c, ts in cs.items()} for t, cs in times.items()}
    for label, cs in med.items():
        line = ", ".join(
            f"{c} {s * 1e3:.0f} ms CPU (wall {statistics.median(w for _, w in times[label][c]) * 1e3:.0f})"
            for c, s in cs.items()
        )
        print(f"{label} ({trees[label]}): median per step {line}")
        if "reference/v1" in cs and "reference/v2" in cs:
            print(f"  v2 / v1: {cs['reference/v2'] / cs['reference/v1']:.2f}x (CPU time)")
    if args.baseline:
        for c in med["this tree"]:
            print(f"{c}: this tree / baseline {med['this tree'][c] / med['baseline'][c]:.2f}x (median CPU time)")


if __name__ == "__main__":
    main()
