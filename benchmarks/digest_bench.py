"""State digest with hashlib alone against the same digest through the SHA-256 lanes (kernels/cpu_sha256.py).

With `--all`, also through each of kernels/cpu_sha256's two ways where this processor runs it (the AVX-512
lanes, the SHA-NI streams), whichever kernels.state_lanes() would choose.

The states are a training state's tensors (params, AdamW moments, step) at the shapes of the lab
bench's TinyLlama (benchmarks/lab_bench.py `--size`), random float32 values; the two ways take turns,
each call preceded by a read of 64 MiB of other memory (a step's own arrays push the state out of the
caches before it is digested), and must give the same digest.

    python benchmarks/digest_bench.py --size 11m --repeats 7
    python benchmarks/digest_bench.py --size 125m --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import kernels
from benchmarks.lab_bench import SIZES, cpu_name
from kernels import cpu_sha256
from p2paudit.tensor_digest import Lanes, _hash_threads, digest_state


def llama_state(vocab: int, c: int, layers: int) -> dict[str, np.ndarray]:
    """TinyLlama's parameter shapes (tests/lab/models.py: untied head, SwiGLU 4C, RMSNorm weights), each with
    its two moments, and the step."""
    shapes = {"embed.weight": (vocab, c), "head.weight": (vocab, c), "norm.weight": (c,)}
    for i in range(layers):
        shapes |= {
            f"blocks.{i}.norm1.weight": (c,),
            f"blocks.{i}.norm2.weight": (c,),
            f"blocks.{i}.qkv.weight": (3 * c, c),
            f"blocks.{i}.proj.weight": (c, c),
            f"blocks.{i}.gate.weight": (4 * c, c),
            f"blocks.{i}.up.weight": (4 * c, c),
            f"blocks.{i}.down.weight": (c, 4 * c),
        }
    rng = np.random.default_rng(0)
    state = {}
    for name, shape in shapes.items():
        for prefix in ("params", "opt/m", "opt/v"):
            state[f"{prefix}/{name}"] = rng.standard_normal(shape, dtype=np.float32)
    state["step"] = np.array(3, np.int64)
    return state


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="11m")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--all", action="store_true", help="also each of the lanes and the SHA-NI streams that runs here")
    args = ap.parse_args()
    vocab, c, _, layers, _ = SIZES[args.size]
    state = llama_state(vocab, c, layers)
    lanes = kernels.state_lanes()
    print(f"cpu: {cpu_name()}, hashing threads {_hash_threads()}, lanes {'used' if lanes else 'not faster here'}")
    mb = sum(a.nbytes for a in state.values()) / 1e6
    print(f"state {args.size}: {len(state)} tensors, {mb:.1f} MB")
    sides: dict[str, Lanes | None] = {"hashlib": None}
    if args.all:
        if cpu_sha256.lanes_fast():
            sides["avx512 lanes"] = cpu_sha256.sha256_lanes
        if cpu_sha256.streams_fast():
            sides["sha-ni streams"] = cpu_sha256.sha256_streams
    elif lanes is not None:
        sides["lanes"] = lanes
    if len(sides) == 1:
        return
    other = np.ones(64 << 18, np.float32)  # 64 MiB
    times: dict[str, list[float]] = {k: [] for k in sides}
    digests = {}
    for k, fn in sides.items():  # warm-up: numba loads (or compiles) the lanes
        digests[k] = digest_state(state, fn)
    if len(set(digests.values())) != 1:
        raise SystemExit(f"the ways gave different digests: {sorted(digests)}")
    for _ in range(args.repeats):
        for k, fn in sides.items():
            other.sum()
            t0 = time.perf_counter()
            digest_state(state, fn)
            times[k].append(time.perf_counter() - t0)
    for k, ts in times.items():
        print(f"  {k:14s} min {min(ts) * 1e3:7.1f} ms  median {statistics.median(ts) * 1e3:7.1f} ms  "
              f"({mb / 1e3 / statistics.median(ts):.2f} GB/s)")  # fmt: skip
    for k in list(sides)[1:]:
        ratio = statistics.median(times["hashlib"]) / statistics.median(times[k])
        print(f"  hashlib / {k} (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
