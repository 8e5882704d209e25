"""Replay cost, digest throughput and replay memory, each against a baseline measured in the same run.

    python benchmarks/replay_bench.py [--config tiny] [--steps 4] [--backend cpu] [--digest-config small]

Prints:
1. state digest throughput (one core, CPU time) vs a bare hashlib.sha256 over
   one contiguous buffer of the same size; target >= 1 GB/s;
2. replaying steps (open + check manifest, shards and every checkpoint, step,
   hash, compare) vs producing them (publish_run: step, hash, write
   checkpoints, sign), and vs bare train_step calls; target ratio <= 1.2.
   Produce, replay and bare runs are interleaved, best of --attempts, in CPU
   time (all threads of this process; robust on a shared machine) and wall time;
3. tracemalloc peak of replaying one step from its checkpoint vs the state
   size plus the peak of a bare train_step on a state already in memory;
   target ratio <= 1.5.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from p2paudit.audit.replay import StepRange, open_run, verify_range
from p2paudit.engine.backends import single_process_step
from p2paudit.identity import identity_from_seed
from p2paudit.run.checkpoint import load_checkpoint
from p2paudit.run.digest import digest_state
from p2paudit.run.publisher import TrainPlan, publish_run

KEY = identity_from_seed(b"\x42" * 32)


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads) of fn()."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def bench_digest(config: str, repeats: int) -> None:
    from p2paudit.engine.config import train_config
    from p2paudit.engine.state import init_state

    state = init_state(train_config(config))
    size = sum(a.nbytes for a in state.values())
    flat = np.concatenate([a.reshape(-1).view(np.uint8) for a in state.values()])
    ours = min(_timed(lambda: digest_state(state))[1] for _ in range(repeats))
    bare = min(_timed(lambda: hashlib.sha256(memoryview(flat)).digest())[1] for _ in range(repeats))
    print(
        f"digest  {config} state {size / 1e6:.1f} MB, {len(state)} tensors: "
        f"digest_state {size / ours / 1e9:.2f} GB/s, bare sha256 {size / bare / 1e9:.2f} GB/s, "
        f"ratio {bare / ours:.2f} of bare speed (CPU time, best of {repeats})"
    )


def _replay_all(run_dir: Path, steps: int, backend: str) -> None:
    report = verify_range(open_run(run_dir), StepRange(False, 0, steps - 1), backend, diagnose=False)
    if not report.all_match:
        raise SystemExit("replay did not match: the benchmark measures a broken build")


def _bare_steps(run_dir: Path, steps: int, backend: str):
    """A callable running the same steps as bare train_step calls: no files, no hashing (set up untimed)."""
    from p2paudit.engine.schedule import batch_for_step
    from p2paudit.engine.state import init_state

    view = open_run(run_dir)
    step = single_process_step(view.cfg, backend, view.manifest.arithmetic)
    batches = [batch_for_step(view.tokens, view.manifest.data.data_key, view.cfg, n) for n in range(steps)]
    initial = init_state(view.cfg)

    def run() -> None:
        state = initial
        for batch in batches:
            state = step(state, batch).state

    return run


def bench_replay(config: str, steps: int, backend: str, work: Path, attempts: int) -> None:
    warm = work / "warm"  # compiles the backend's kernels outside the timed part
    publish_run(TrainPlan(warm, config, steps=1, backend=backend), KEY)
    verify_range(open_run(warm), StepRange(False, 0, 0), backend, diagnose=False)
    times: dict[str, list[tuple[float, float]]] = {"produce": [], "replay": [], "bare": []}
    for attempt in range(attempts):  # interleaved, so that a burst of load hits all three alike
        run_dir = work / f"run{attempt}"
        plan = TrainPlan(run_dir, config, steps=steps, ckpt_every=1, backend=backend)
        times["produce"].append(_timed(lambda: publish_run(plan, KEY)))  # noqa: B023  (called at once)
        times["replay"].append(_timed(lambda: _replay_all(run_dir, steps, backend)))  # noqa: B023
        times["bare"].append(_timed(_bare_steps(run_dir, steps, backend)))
    for clock, index in (("cpu", 1), ("wall", 0)):
        p, r, b = (min(t[index] for t in times[k]) / steps for k in ("produce", "replay", "bare"))
        print(
            f"replay  {config}, {steps} steps, checkpoint every step, backend {backend}, {clock} time "
            f"(best of {attempts}): produce {p:.3f} s/step, replay {r:.3f} s/step, ratio {r / p:.2f} "
            f"(target <= 1.2); bare train_step {b:.3f} s/step, replay/bare {r / b:.2f}"
        )


def bench_memory(config: str, backend: str, work: Path) -> None:
    from p2paudit.engine.schedule import batch_for_step

    run_dir = work / "mem"
    publish_run(TrainPlan(run_dir, config, steps=2, ckpt_every=1, backend=backend), KEY)
    view = open_run(run_dir)
    step = single_process_step(view.cfg, backend, view.manifest.arithmetic)
    state = load_checkpoint(run_dir, 1, view.manifest.state_digest(1), list(view.names))
    batch = batch_for_step(view.tokens, view.manifest.data.data_key, view.cfg, 1)
    state_bytes = sum(a.nbytes for a in state.values())
    tracemalloc.start()
    step(state, batch)
    _, step_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del state
    tracemalloc.start()
    verify_range(view, StepRange(False, 1, 1), backend, diagnose=False)
    _, replay_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    budget = state_bytes + step_peak
    print(
        f"memory  {config}: state {state_bytes / 1e6:.2f} MB, bare step peak {step_peak / 1e6:.2f} MB, "
        f"replay of one step peak {replay_peak / 1e6:.2f} MB, ratio {replay_peak / budget:.2f} of "
        f"(state + step) (target <= 1.5; tracemalloc)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--digest-config", default="small")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--attempts", type=int, default=3)
    args = parser.parse_args()
    bench_digest(args.digest_config, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        bench_replay(args.config, args.steps, args.backend, Path(tmp), args.attempts)
        bench_memory(args.config, args.backend, Path(tmp))


if __name__ == "__main__":
    main()
