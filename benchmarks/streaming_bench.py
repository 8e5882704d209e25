"""Peak memory and time of one replayed step, streamed (audit.streamed_replay's path) and in memory (issue 9 item 3).

For `--config` (a preset; seq_len, batch size and micro-batches overridable),
the parent writes state 0 (init_state, tensor by tensor) as a checkpoint in
`--workdir`, and the first step's batch. Then, each in its own child process,
so that each peak is its own (VmHWM):

- streamed: open the checkpoint (header checked), verify its digest one
  tensor at a time, read the parameters, run engine.streaming.streamed_step
  with the partial sums on disk (run.spill.DiskGradStore) and the moments read
  per parameter, digest every new tensor and write state 1 with
  CheckpointWriter; exactly what verify_range_streamed does for one step
  inside a range (it also compares digests with the manifest);
- in memory (`--in-memory`, skipped when its estimate exceeds the memory
  available): load_checkpoint, train_step, digest_state: verify_range's path.

Both print the state-1 digest and the loss; when both ran they must be equal
(bitwise), and the script fails otherwise. The target is checked against
engine.memory's figures: peak <= 1.3 x (parameters + gradients) + one
micro-batch's activations.

    python benchmarks/streaming_bench.py --config 125m --seq-len 1024 --batch 1 --micro-batches 2 --in-memory
    python benchmarks/streaming_bench.py --config 1b --seq-len 2048 --batch 1 --micro-batches 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()


def make_config(args: argparse.Namespace):  # -> TrainConfig
    from p2paudit.engine.config import train_config

    cfg = train_config(args.config, micro_batches=args.micro_batches)
    model = cfg.model if args.seq_len is None else dataclasses.replace(cfg.model, seq_len=args.seq_len)
    return dataclasses.replace(cfg, model=model, batch_size=args.batch)


def peak_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def prepare(args: argparse.Namespace, work: Path) -> None:
    """State 0 as checkpoint 0 of `work` (written tensor by tensor), and the batch."""
    from p2paudit.run.streamed_step import write_initial_state

    cfg = make_config(args)
    digest = write_initial_state(work, cfg)
    (work / "state0.json").write_text(json.dumps(digest.to_dict()))
    rng = np.random.default_rng(0)
    shape = (cfg.micro_batches, cfg.batch_size, cfg.model.seq_len + 1)
    np.save(work / "batch.npy", rng.integers(0, cfg.model.vocab_size, size=shape).astype(np.int64))


def child(args: argparse.Namespace) -> dict:
    from p2paudit.engine.backends import load_backend
    from p2paudit.engine.state import state_names, state_shapes
    from p2paudit.engine.step import train_step
    from p2paudit.run.checkpoint import CheckpointWriter, checkpoint_path, load_checkpoint, open_checkpoint
    from p2paudit.run.digest import StateDigest, digest_state
    from p2paudit.run.spill import DiskGradStore
    from p2paudit.run.streamed_step import stream_step

    cfg = make_config(args)
    work = Path(args.workdir)
    be = load_backend("cpu", args.arithmetic)
    batch = np.load(work / "batch.npy")
    expected = StateDigest.from_dict(json.loads((work / "state0.json").read_text()), "state0.json")
    began = time.perf_counter()
    if args.child == "in-memory":
        state = load_checkpoint(work, 0, expected, state_names(cfg), state_shapes(cfg))
        loaded = time.perf_counter()
        result = train_step(state, batch, cfg, be)
        del state
        digest, loss, spilled = digest_state(result.state), result.loss, 0
    else:
        with open_checkpoint(work, 0, expected, state_names(cfg), state_shapes(cfg)) as reader:
            reader.verify(expected)
            loaded = time.perf_counter()
            first_out: list[float] = []

            def note(name, array, digest):
                first_out.append(first_out[0] if first_out else time.perf_counter())

            out_dir = work / "streamed-out"
            with (
                CheckpointWriter(out_dir / checkpoint_path(1), 1, state_shapes(cfg)) as writer,
                tempfile.TemporaryDirectory(dir=work) as spill_dir,
                DiskGradStore(Path(spill_dir)) as store,
            ):
                result = stream_step(reader, batch, cfg, be, store, writer, note)
                spilled = store.bytes_written
            digest, loss = result.output, result.loss
    done = time.perf_counter()
    grads_s = (first_out[0] if args.child == "streamed" else done) - loaded
    return {
        "side": args.child,
        "seconds_grads": grads_s,
        "seconds_update": done - loaded - grads_s,
        "digest": digest.text(),
        "loss": float(loss),
        "seconds_total": done - began,
        "seconds_load": loaded - began,
        "peak_bytes": peak_bytes(),
        "spilled_bytes": spilled,
        "threads": os.environ.get("NUMBA_NUM_THREADS", "default"),
    }


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="125m")
    parser.add_argument("--seq-len", type=int, default=None)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--micro-batches", type=int, default=2)
    parser.add_argument("--in-memory", action="store_true", help="also run the in-memory replay and compare")
    parser.add_argument("--project", type=int, nargs="*", default=[65_536], help="token counts to project to")
    parser.add_argument("--workdir", default=None, help="where the checkpoints go (default: a temp dir in .)")
    parser.add_argument("--child", choices=["streamed", "in-memory"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--arithmetic", type=int, choices=(1, 2), default=None,
                        help="the engine's arithmetic version (default: kernels.ARITHMETIC_VERSION)")  # fmt: skip
    args = parser.parse_args()
    if args.arithmetic is None:
        from kernels import ARITHMETIC_VERSION

        args.arithmetic = ARITHMETIC_VERSION
    if args.child:
        print(json.dumps(child(args)))
        return
    from p2paudit.engine.config import count_parameters
    from p2paudit.engine.memory import available_bytes, estimate_memory

    cfg = make_config(args)
    estimate = estimate_memory(cfg)
    P = count_parameters(cfg.model)
    tokens = cfg.micro_batches * cfg.batch_size * cfg.model.seq_len
    target = 1.3 * 2 * 4 * P + estimate.activations
    cpu = next((x.split(":", 1)[1].strip() for x in open("/proc/cpuinfo") if x.startswith("model name")), "?")
    print(
        f"{args.config}: {P:,} parameters; {cfg.micro_batches} micro-batch(es) of {cfg.batch_size} x {cfg.model.seq_len}"
    )
    print(f"  = {tokens:,} tokens per step; {cpu}, {os.cpu_count()} cores")
    print(
        f"  estimates: in-memory replay {gib(estimate.replay)}, streamed {gib(estimate.streaming_replay)}; "
        f"target 1.3 x (params + grads) + activations = {gib(target)}"
    )
    with tempfile.TemporaryDirectory(dir=args.workdir or ".", prefix="streaming-bench-") as tmp:
        work = Path(tmp)
        began = time.perf_counter()
        prepare(args, work)
        print(f"  state 0 written in {time.perf_counter() - began:.1f} s")
        sides = ["streamed"]
        have = available_bytes()
        if args.in_memory and (have is None or estimate.replay < have):
            sides.append("in-memory")
        elif args.in_memory:
            print(f"  in-memory replay skipped: needs about {gib(estimate.replay)}, {gib(have)} available")
        results = {}
        for side in sides:
            cmd = [sys.executable, str(HERE), "--child", side, "--workdir", str(work), "--config", args.config]
            cmd += ["--batch", str(args.batch), "--micro-batches", str(args.micro_batches)]
            cmd += ["--arithmetic", str(args.arithmetic)]
            cmd += ["--seq-len", str(args.seq_len)] if args.seq_len is not None else []
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit(f"{side} child failed: {out.stderr.strip().splitlines()[-1:]}")
            r = results[side] = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"  {side:9s}: {r['seconds_total']:8.1f} s (checkpoint read/check {r['seconds_load']:.1f} s, "
                f"gradients {r['seconds_grads']:.1f} s, update {r['seconds_update']:.1f} s), "
                f"peak RSS {gib(r['peak_bytes'])} = {r['peak_bytes'] / target:.2f} x target, "
                f"spilled {gib(r['spilled_bytes'])}, loss {r['loss']!r}"
            )
        if len(results) == 2:
            same = results["streamed"]["digest"] == results["in-memory"]["digest"]
            same = same and results["streamed"]["loss"] == results["in-memory"]["loss"]
            ratio = results["in-memory"]["peak_bytes"] / results["streamed"]["peak_bytes"]
            print(f"  state 1 digests and losses equal: {same}; in-memory / streamed peak = {ratio:.2f}x")
            if not same:
                sys.exit("streamed and in-memory replays differ")
        print(f"  state 1: {results['streamed']['digest']}")
        r = results["streamed"]
        per_token = r["seconds_grads"] / tokens
        for target_tokens in args.project:
            projected = r["seconds_load"] + per_token * target_tokens + r["seconds_update"]
            print(
                f"  projected streamed replay at {target_tokens:,} tokens (the gradients scaled by tokens): "
                f"{projected:.0f} s = {projected / 3600:.2f} h"
            )


if __name__ == "__main__":
    main()
