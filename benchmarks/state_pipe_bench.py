"""A lab replay's state, sent by its child over a pipe and digested by the parent: as it arrives
(run.checkpoint_stream, what audit.lab_isolation does) against written to a file first and digested from
there (run.checkpoint.digest_checkpoint, what it did before).

The state is TinyLlama's at `--size` (benchmarks/lab_bench.py), random float32 params and moments
(benchmarks/digest_bench.py), sent by a child process as checkpoint bytes a tensor at a time
(run.checkpoint.checkpoint_pieces). The two ways
take turns, `--repeats` times each; printed: each way's median wall time, from the state's first byte to
its digest, and the bytes the file way wrote to disk (the stream way writes none).

    PYTHONPATH=. python benchmarks/state_pipe_bench.py --size 125m --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.digest_bench import llama_state
from benchmarks.lab_bench import SIZES, cpu_name
from p2paudit.run.checkpoint import checkpoint_path, checkpoint_pieces, digest_checkpoint
from p2paudit.run.checkpoint_stream import CheckpointStream
from p2paudit.run.digest import digest_state

_CHUNK = 1 << 20


def _state(size: str) -> dict[str, np.ndarray]:
    vocab, c, _, layers, _ = SIZES[size]
    return llama_state(vocab, c, layers)


def _send(size: str, fd: int) -> None:
    """The child: the state's checkpoint bytes on `fd`."""
    state = _state(size)
    with os.fdopen(fd, "wb") as pipe:
        for piece in checkpoint_pieces(1, state, digest_state(state)):
            pipe.write(piece)


def _receive(size: str, names: list[str], bound: int, to_file: bool) -> tuple[float, bytes, int]:
    """(seconds from the state's first byte to its digest, the digest, bytes written to disk)."""
    read, write = os.pipe()
    child = subprocess.Popen(
        [sys.executable, __file__, "--size", size, "--send", str(write)], pass_fds=(write,), env=os.environ
    )
    os.close(write)
    chunk = os.read(read, _CHUNK)  # the child has made its state: the clock starts at its first byte
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        written = 0
        if to_file:
            path = Path(scratch) / checkpoint_path(1)
            path.parent.mkdir(parents=True)
            with path.open("wb") as f:
                while chunk:
                    f.write(chunk)
                    written += len(chunk)
                    chunk = os.read(read, _CHUNK)
            digest = digest_checkpoint(Path(scratch), 1, names)
        else:
            stream = CheckpointStream(1, names, bound, "allowed", "the pipe")
            while chunk:
                stream.feed(chunk)
                chunk = os.read(read, _CHUNK)
            digest = stream.finish()
    seconds = time.perf_counter() - t0
    os.close(read)
    child.wait()
    return seconds, digest.digest, written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="11m")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--send", type=int, help="(the child) the pipe to send the state on")
    args = ap.parse_args()
    if args.send is not None:
        _send(args.size, args.send)
        return
    state = _state(args.size)
    names, total = sorted(state), sum(a.nbytes for a in state.values())
    want = digest_state(state).digest
    del state
    times: dict[str, list[float]] = {"stream": [], "file": []}
    written = 0
    for _ in range(args.repeats):
        for way in ("stream", "file"):
            seconds, digest, wrote = _receive(args.size, names, total + (1 << 20), way == "file")
            if digest != want:
                raise SystemExit(f"{way}: the digest is not the state's")
            times[way].append(seconds)
            written = max(written, wrote)
    print(f"cpu: {cpu_name()}; state of {args.size}: {len(names)} tensors, {total / 2**30:.2f} GiB")
    for way, ts in times.items():
        print(f"  {way:6s} median {statistics.median(ts):.2f} s  ({', '.join(f'{t:.2f}' for t in ts)})")
    print(f"  the file way wrote {written / 2**30:.2f} GiB to {tempfile.gettempdir()}; the stream way none")


if __name__ == "__main__":
    main()
