"""Replay cost, digest throughput and replay memory, each against a baseline measured in the same run.

    python benchmarks/replay_bench.py [--config tiny] [--steps 4] [--backend cpu] [--digest-config small]

Prints three figures:
1. state digest throughput (one core) vs a bare hashlib.sha256 over one
   contiguous buffer of the same size; target >= 1 GB/s;
2. replaying steps (open + check manifest, shards and every checkpoint,
   step, hash, compare) vs producing them (publish_run: step, hash, write
   checkpoints, sign); target ratio <= 1.2;
3. tracemalloc peak of replaying one step from its checkpoint vs the state
   size plus the peak of a bare train_step on a state already in memory;
   target ratio <= 1.5.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

# benchmarks/kernels.py (another benchmark) would shadow the `kernels` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import numpy as np  # noqa: E402

from p2paudit.audit.replay import open_run, verify_range  # noqa: E402
from p2paudit.identity import identity_from_seed  # noqa: E402
from p2paudit.run.digest import digest_state  # noqa: E402
from p2paudit.run.publisher import TrainPlan, publish_run, single_process_step  # noqa: E402

KEY = identity_from_seed(b"\x42" * 32)


def bench_digest(config: str, repeats: int) -> None:
    from p2paudit.engine.config import train_config
    from p2paudit.engine.state import init_state

    state = init_state(train_config(config))
    size = sum(a.nbytes for a in state.values())
    flat = np.concatenate([a.reshape(-1).view(np.uint8) for a in state.values()])
    ours = min(_timed(lambda: digest_state(state)) for _ in range(repeats))
    bare = min(_timed(lambda: hashlib.sha256(memoryview(flat)).digest()) for _ in range(repeats))
    print(f"digest  {config} state {size / 1e6:.1f} MB, {len(state)} tensors: "
          f"digest_state {size / ours / 1e9:.2f} GB/s, bare sha256 {size / bare / 1e9:.2f} GB/s, "
          f"ratio {bare / ours:.2f} of bare speed (best of {repeats})")


def bench_replay(config: str, steps: int, backend: str, work: Path) -> None:
    warm = work / "warm"  # compiles the backend's kernels outside the timed part
    publish_run(TrainPlan(warm, config, steps=1, backend=backend), KEY)
    verify_range(open_run(warm), 0, 0, backend, diagnose=False)
    produce, replay = [], []
    for attempt in range(2):
        run_dir = work / f"run{attempt}"
        produce.append(_timed(lambda: publish_run(TrainPlan(run_dir, config, steps=steps, ckpt_every=1,
                                                            backend=backend), KEY)))
        replay.append(_timed(lambda: _replay_all(run_dir, steps, backend)))
    p, r = min(produce), min(replay)
    print(f"replay  {config}, {steps} steps, checkpoint every step, backend {backend}: produce {p / steps:.3f} s/step, "
          f"replay {r / steps:.3f} s/step, ratio {r / p:.2f} (target <= 1.2; best of 2)")


def _replay_all(run_dir: Path, steps: int, backend: str) -> None:
    report = verify_range(open_run(run_dir), 0, steps - 1, backend, diagnose=False)
    if not report.all_match:
        raise SystemExit("replay did not match: the benchmark measures a broken build")


def bench_memory(config: str, backend: str, work: Path) -> None:
    from p2paudit.engine.schedule import batch_for_step

    run_dir = work / "mem"
    publish_run(TrainPlan(run_dir, config, steps=2, ckpt_every=1, backend=backend), KEY)
    view = open_run(run_dir)
    step = single_process_step(view.cfg, backend)
    from p2paudit.run.checkpoint import load_checkpoint

    state = load_checkpoint(run_dir, 1, view.manifest.state_digest(1), list(view.names))
    batch = batch_for_step(view.tokens, view.manifest.data.data_key, view.cfg, 1)
    state_bytes = sum(a.nbytes for a in state.values())
    tracemalloc.start()
    step(state, batch)
    _, step_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del state
    tracemalloc.start()
    verify_range(view, 1, 1, backend, diagnose=False)
    _, replay_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    budget = state_bytes + step_peak
    print(f"memory  {config}: state {state_bytes / 1e6:.2f} MB, bare step peak {step_peak / 1e6:.2f} MB, "
          f"replay of one step peak {replay_peak / 1e6:.2f} MB, ratio {replay_peak / budget:.2f} of "
          f"(state + step) (target <= 1.5; tracemalloc)")


def _timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="tiny")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--digest-config", default="small")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    bench_digest(args.digest_config, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        bench_replay(args.config, args.steps, args.backend, Path(tmp))
        bench_memory(args.config, args.backend, Path(tmp))


if __name__ == "__main__":
    main()
