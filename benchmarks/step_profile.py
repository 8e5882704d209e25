"""Where one training step's time goes, kernel by kernel, at arithmetic version 1 and 2 (cpu backend).

Each function of the backend is wrapped in a timer (wall time, the calls of one
step summed); one warm-up step first (numba compiles), then `--repeats` steps of
each version, taking turns. Prints each op's share of the step: the figures
behind docs/arithmetic.md section 7's choice to fuse only the dot products.

    python benchmarks/step_profile.py --config small --repeats 2
"""

from __future__ import annotations

import argparse
import platform
import time
import types
from collections import defaultdict
from typing import Any

import numpy as np

import kernels
from kernels.backend_contract import contract_functions
from p2paudit.engine.config import train_config
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step


def timed(backend: Any, totals: dict[str, float]) -> Any:
    """A view of `backend` whose every contract function adds its wall time to totals[name]."""
    view = types.SimpleNamespace()
    for name in contract_functions():
        fn = getattr(backend, name)

        def wrapper(*args: Any, _fn: Any = fn, _name: str = name, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                totals[_name] += time.perf_counter() - start

        setattr(view, name, wrapper)
    return view


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default="small")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    cfg = train_config(args.config)
    state = init_state(cfg)
    m = cfg.model
    batch = np.random.default_rng(0).integers(0, m.vocab_size, (cfg.micro_batches, cfg.batch_size, m.seq_len + 1))
    totals = {v: defaultdict(float) for v in (1, 2)}
    steps = {1: 0.0, 2: 0.0}
    for version in (1, 2):  # warm-up: compile
        train_step(state, batch, cfg, kernels.get_backend("cpu", version))
    for _ in range(args.repeats):
        for version in (1, 2):
            backend = timed(kernels.get_backend("cpu", version), totals[version])
            start = time.perf_counter()
            train_step(state, batch, cfg, backend)
            steps[version] += time.perf_counter() - start
    print(f"# {args.config}, {args.repeats} steps per version, {platform.processor() or platform.machine()}")
    print("| op | v1 s/step | v1 share | v2 s/step | v2 share |")
    print("|---|---|---|---|---|")
    names = sorted(totals[1], key=lambda n: -totals[1][n])
    for name in names:
        cells = []
        for v in (1, 2):
            per = totals[v][name] / args.repeats
            cells += [f"{per:.3f}", f"{100 * per / (steps[v] / args.repeats):.1f}%"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"| whole step | {steps[1] / args.repeats:.3f} | | {steps[2] / args.repeats:.3f} | |")


if __name__ == "__main__":
    main()
