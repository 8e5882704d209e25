"""Speed and memory at size (issue 9 item 4): the engine against stock PyTorch at 125m / 350m, and 1b's micro-batch.

For each of `--configs` (default 125m 350m) the preset's shape is kept but the
step is shrunk to a stated token count (micro_batches=1, `--batch` sequences of
`--seq-len` tokens; seq_len is overridden with dataclasses.replace, so wpe has
seq_len rows). Each side runs in its own child process so that its peak
resident memory is its own:

- engine: `single_process_step(cfg, "cpu", args.arithmetic)(init_state(cfg), batch)`, one
  untimed warm-up step (numba compiles), then `--repeats` timed steps, then one
  more step split into micro_batch_grads and apply_update (the breakdown);
- torch: the same model in float32 PyTorch autograd + torch.optim.AdamW
  (benchmarks/step_bench.torch_stepper), torch.set_num_threads = numba's
  thread count, one untimed warm-up step, then `--repeats` timed steps.

`--interleave` instead runs both sides in one child process taking turns
step by step (step_bench.time_alternating), so that load changes on a shared
machine hit both alike; it reports times only.

Peak RSS is VmHWM after `clear_refs` = 5 (reset after the warm-up), so it
covers the timed steps and includes the resident state.

`--one-b` measures one micro-batch forward+backward of the `1b` preset
(engine.step.micro_batch_grads) at `--one-b-seq-len` tokens, after a warm-up
on the same shape cut to one layer (the same numba kernels). The AdamW moments of init_state are
np.zeros never touched by a micro-batch, so they are not resident; a full 1b
step (apply_update builds a new 3P state next to the old: 7P = 28 GB) does not
fit 24 GiB and is not run. The replay time at 65,536 tokens is projected from
the measured micro-batch by the ratio of matmul+attention FLOPs (see
`flops_per_token`), plus the AdamW update projected from the 350m breakdown
scaled by parameter count.

    python benchmarks/size_bench.py --configs 125m 350m --seq-len 256 --repeats 2 --one-b
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

HERE = Path(__file__).resolve()
REPLAY_TOKENS = 65_536


def sized_config(name: str, seq_len: int | None, batch: int):  # -> TrainConfig
    from p2paudit.engine.config import train_config

    cfg = train_config(name, micro_batches=1)
    model = cfg.model if seq_len is None else dataclasses.replace(cfg.model, seq_len=seq_len)
    return dataclasses.replace(cfg, model=model, batch_size=batch)


def random_batch(cfg, seed: int) -> np.ndarray:
    shape = (cfg.micro_batches, cfg.batch_size, cfg.model.seq_len + 1)
    return np.random.default_rng(seed).integers(0, cfg.model.vocab_size, shape, dtype=np.int64)


def proc_status(key: str) -> int:
    """A /proc/self/status field in bytes (VmHWM, VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def flops_per_token(m, T: int) -> float:
    """Forward + backward FLOPs per token: 3 x (2 x matmul weights + 2 x 2 x T x C per layer for QK^T and AV).

    Attention is counted over the full T x T square (what a non-causal-skipping kernel does).
    """
    C, F, V, L = m.n_embd, m.mlp_mult * m.n_embd, m.vocab_size, m.n_layer
    weights = L * (4 * C * C + 2 * C * F) + V * C
    return 3.0 * (2.0 * weights + L * 4.0 * T * C)


def child(args: argparse.Namespace) -> dict:
    import numba
    import torch

    threads = numba.get_num_threads()
    torch.set_num_threads(threads)
    out: dict = {"side": args.child, "config": args.config, "threads": threads}
    if args.child == "engine":
        from p2paudit.engine.backends import load_backend, single_process_step
        from p2paudit.engine.state import init_state
        from p2paudit.engine.step import apply_update, micro_batch_grads

        cfg = sized_config(args.config, args.seq_len, args.batch)
        step = single_process_step(cfg, "cpu", args.arithmetic)
        state = init_state(cfg)
        state = step(state, random_batch(cfg, 0)).state  # warm-up: numba compiles
        reset_peak()
        out["rss_start"] = proc_status("VmRSS")
        times = []
        for r in range(args.repeats):
            batch = random_batch(cfg, r + 1)
            t0 = time.perf_counter()
            state = step(state, batch).state
            times.append(time.perf_counter() - t0)
        out["peak"] = proc_status("VmHWM")
        backend = load_backend("cpu", args.arithmetic)
        t0 = time.perf_counter()
        grads, _ = micro_batch_grads(state, random_batch(cfg, 99)[0], cfg, backend)
        t1 = time.perf_counter()
        apply_update(state, grads, cfg, backend)
        t2 = time.perf_counter()
        out.update(times=times, micro_batch_s=t1 - t0, update_s=t2 - t1)
    elif args.child == "torch":
        from step_bench import torch_stepper

        cfg = sized_config(args.config, args.seq_len, args.batch)
        step = torch_stepper(cfg)
        step(random_batch(cfg, 0))  # warm-up
        reset_peak()
        out["rss_start"] = proc_status("VmRSS")
        times = []
        for r in range(args.repeats):
            batch = random_batch(cfg, r + 1)
            t0 = time.perf_counter()
            step(batch)
            times.append(time.perf_counter() - t0)
        out["peak"] = proc_status("VmHWM")
        out["times"] = times
    elif args.child == "both":
        # Both sides in one process, taking turns step by step (step_bench.time_alternating), so that a
        # change in machine load hits both alike; peak RSS is not separable here and is not reported.
        from step_bench import engine_stepper, time_alternating, torch_stepper

        cfg = sized_config(args.config, args.seq_len, args.batch)
        batches = [random_batch(cfg, r) for r in range(args.repeats + 1)]
        eng, ref = time_alternating([engine_stepper(cfg, "cpu", args.arithmetic), torch_stepper(cfg)], batches)
        out.update(times=eng, torch_times=ref)
    elif args.child == "engine-mb":
        from p2paudit.engine.backends import load_backend
        from p2paudit.engine.memory import estimate_memory
        from p2paudit.engine.state import init_state
        from p2paudit.engine.step import micro_batch_grads

        backend = load_backend("cpu", args.arithmetic)
        cfg = sized_config(args.config, args.seq_len, args.batch)
        # Warm-up on the same shape with one layer (same widths, tokens and head): numba compiles.
        small = dataclasses.replace(cfg.model, name="warmup", n_layer=1)
        small_cfg = dataclasses.replace(cfg, model=small, batch_size=1)
        micro_batch_grads(init_state(small_cfg), random_batch(small_cfg, 0)[0], small_cfg, backend)
        est = estimate_memory(cfg)
        out["estimate"] = dataclasses.asdict(est)
        state = init_state(cfg)
        reset_peak()
        out["rss_start"] = proc_status("VmRSS")
        t0 = time.perf_counter()
        grads, _ = micro_batch_grads(state, random_batch(cfg, 1)[0], cfg, backend)
        out["times"] = [time.perf_counter() - t0]
        out["peak"] = proc_status("VmHWM")
    else:
        raise SystemExit(f"unknown child {args.child}")
    out["load_after"] = os.getloadavg()
    return out


def run_child(side: str, config: str, seq_len: int, batch: int, repeats: int) -> dict:
    load_before = os.getloadavg()
    cmd = [sys.executable, str(HERE), "--child", side, "--config", config, "--arithmetic", str(ARITHMETIC[0])]
    cmd += ["--seq-len", str(seq_len), "--batch", str(batch), "--repeats", str(repeats)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise SystemExit(f"{side} {config} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["load_before"] = load_before
    res["wall_s"] = time.perf_counter() - t0
    return res


WAIT_DEADLINE: list[float] = []
ARITHMETIC = [1]  # the engine's arithmetic version for the children (--arithmetic)


def wait_for_load(limit: float, max_wait_s: float) -> None:
    """Sleep until the 1-minute load average is below `limit`; max_wait_s is the budget for the whole run."""
    if not WAIT_DEADLINE:
        WAIT_DEADLINE.append(time.time() + max_wait_s)
    while os.getloadavg()[0] >= limit and time.time() < WAIT_DEADLINE[0]:
        time.sleep(10)


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def load_str(r: dict) -> str:
    return f"{r['load_before'][0]:.2f} -> {r['load_after'][0]:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="*", default=["125m", "350m"])
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--one-b", action="store_true", help="also measure one 1b micro-batch")
    ap.add_argument("--one-b-config", default="1b")
    ap.add_argument("--one-b-seq-len", type=int, default=256)
    ap.add_argument(
        "--wait-load",
        type=float,
        default=1.5,
        help="before each part, wait for 1-min load below this (--max-wait s in all)",
    )
    ap.add_argument("--max-wait", type=float, default=300.0)
    ap.add_argument("--interleave", action="store_true", help="both sides in one process, alternating (no RSS)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--arithmetic", type=int, choices=(1, 2), default=None,
                    help="the engine's arithmetic version (default: kernels.ARITHMETIC_VERSION)")  # fmt: skip
    args = ap.parse_args()
    if args.arithmetic is None:
        from kernels import ARITHMETIC_VERSION

        args.arithmetic = ARITHMETIC_VERSION
    ARITHMETIC[0] = args.arithmetic
    if args.child:
        print(json.dumps(child(args)))
        return

    from p2paudit.engine.config import count_parameters
    from p2paudit.engine.memory import estimate_memory, format_bytes

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"cpu: {cpu}, {os.cpu_count()} logical CPUs, load average {os.getloadavg()}")
    print(
        f"command: {' '.join([Path(sys.executable).name, *sys.argv])}; engine at arithmetic version {args.arithmetic}"
    )
    print()
    print("| config | params | B x T (tokens/step) | engine min / median | torch min / median | ratio (min) "
          "| ratio (median) | engine peak RSS | torch peak RSS | threads | load (1 min) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    breakdown = {}
    for name in args.configs if args.interleave else []:
        cfg = sized_config(name, args.seq_len, args.batch)
        wait_for_load(args.wait_load, args.max_wait)
        r = run_child("both", name, args.seq_len, args.batch, args.repeats)
        e, t = r["times"], r["torch_times"]
        print(
            f"| {name} (interleaved) | {count_parameters(cfg.model) / 1e6:.1f} M | {args.batch} x {args.seq_len} "
            f"({args.batch * args.seq_len}) | {min(e):.2f} / {statistics.median(e):.2f} s "
            f"| {min(t):.2f} / {statistics.median(t):.2f} s | {min(e) / min(t):.2f}x "
            f"| {statistics.median(e) / statistics.median(t):.2f}x | - | - | {r['threads']} | {load_str(r)} |",
            flush=True,
        )
    for name in args.configs if not args.interleave else []:
        cfg = sized_config(name, args.seq_len, args.batch)
        wait_for_load(args.wait_load, args.max_wait)
        eng = run_child("engine", name, args.seq_len, args.batch, args.repeats)
        wait_for_load(args.wait_load, args.max_wait)
        ref = run_child("torch", name, args.seq_len, args.batch, args.repeats)
        breakdown[name] = (eng["micro_batch_s"], eng["update_s"], count_parameters(cfg.model))
        e, t = eng["times"], ref["times"]
        print(
            f"| {name} | {count_parameters(cfg.model) / 1e6:.1f} M | {args.batch} x {args.seq_len} "
            f"({args.batch * args.seq_len}) | {min(e):.2f} / {statistics.median(e):.2f} s "
            f"| {min(t):.2f} / {statistics.median(t):.2f} s | {min(e) / min(t):.2f}x "
            f"| {statistics.median(e) / statistics.median(t):.2f}x | {gib(eng['peak'])} | {gib(ref['peak'])} "
            f"| {eng['threads']} / {ref['threads']} | engine {load_str(eng)}, torch {load_str(ref)} |",
            flush=True,
        )
    if breakdown:
        print()
        print("engine breakdown (one extra step): " + "; ".join(
            f"{n}: micro-batch {mb:.2f} s, AdamW update {up:.2f} s" for n, (mb, up, _) in breakdown.items()
        ))  # fmt: skip
    if not args.one_b:
        return
    name, T = args.one_b_config, args.one_b_seq_len
    cfg = sized_config(name, T, 1)
    est = estimate_memory(cfg)
    P = count_parameters(cfg.model)
    print()
    print(f"{name} estimate at 1 x {T}: {est.describe()}")
    mb_need = est.parameters + 2 * est.parameters + est.activations  # params, grads (+ a grad sum), activations
    print(f"micro-batch needs about {format_bytes(mb_need)} (params + 2 x grads + activations)")
    wait_for_load(args.wait_load, args.max_wait)
    r = run_child("engine-mb", name, T, 1, 1)
    mb_s = r["times"][0]
    print(
        f"| {name} | {P / 1e6:.0f} M | 1 x {T} ({T}) | micro-batch fwd+bwd {mb_s:.1f} s | peak RSS {gib(r['peak'])} "
        f"(RSS before {gib(r['rss_start'])}) | threads {r['threads']} | load {load_str(r)} |"
    )
    full = sized_config(name, None, 1)
    per_tok_meas = flops_per_token(cfg.model, T)
    per_tok_full = flops_per_token(full.model, full.model.seq_len)
    mb_proj = mb_s * (REPLAY_TOKENS * per_tok_full) / (T * per_tok_meas)
    line = (
        f"projection to {REPLAY_TOKENS} tokens at seq_len {full.model.seq_len}: micro-batches "
        f"{mb_s:.1f} s x {REPLAY_TOKENS / T:.0f} x {per_tok_full / per_tok_meas:.3f} (FLOPs/token at "
        f"T={full.model.seq_len} vs T={T}) = {mb_proj:.0f} s"
    )
    if "350m" in breakdown:
        _, up, p350 = breakdown["350m"]
        up_proj = up * P / p350
        line += f"; AdamW update {up:.2f} s x {P / p350:.2f} (params 1b/350m) = {up_proj:.1f} s"
        mb_proj += up_proj
    print(line + f"; total {mb_proj:.0f} s = {mb_proj / 3600:.2f} h")


if __name__ == "__main__":
    main()
