"""Memory of reading a large signed manifest (issue 14, red team): peak against the manifest's size.

A signed manifest of 252 MB (45,000 steps of the tiny config, 58 tensor
digests a step) peaked at 3.4 GB over HTTP. This benchmark writes a signed
manifest of `--steps` steps of the tiny config (real digests of random
tensors' names; the claims are never replayed, only parsed and checked),
then reads it in a child process per reader, so each peak is its own:

- `local`: run.manifest.read_manifest of the run directory;
- `http`: RemoteRun(URL).manifest from a loopback HTTP server (the same
  bytes through the bounded fetch).

Each child reports the peak of Python's allocations (tracemalloc: bytes,
strings, dicts, the parsed records) and its peak resident set (VmHWM), and
the ratios of both to the manifest's size, measured in the same run; the
estimate run.manifest.manifest_memory is printed beside them.

    python benchmarks/manifest_bench.py --steps 4500
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def write_signed_manifest(run_dir: Path, steps: int, seed: int = 0) -> int:
    """A signed manifest of `steps` steps of the tiny config in `run_dir`; its size in bytes."""
    from kernels import ARITHMETIC_VERSION
    from p2paudit.engine.config import train_config
    from p2paudit.engine.state import state_names
    from p2paudit.identity import identity_from_seed
    from p2paudit.run.digest import StateDigest, combine_tensor_digests
    from p2paudit.run.manifest import write_manifest
    from p2paudit.run.manifest_body import Body, StepRecord, expected_checkpoints
    from p2paudit.run.shards import CORPUS_NAME, describe_corpus

    rng = np.random.default_rng(seed)
    cfg = train_config("tiny", steps=steps)
    names = sorted(state_names(cfg), key=lambda n: n.encode("utf-8"))

    def state() -> StateDigest:
        tensors = tuple((name, rng.bytes(32)) for name in names)
        return StateDigest(combine_tensor_digests(tensors), tensors)

    records = tuple(StepRecord(n, rng.bytes(32), float(np.float32(rng.uniform(1, 6))), state()) for n in range(steps))
    checkpoints = tuple(expected_checkpoints(steps, steps, steps))
    body = Body(
        "p2paudit bench",
        ARITHMETIC_VERSION,
        cfg,
        steps,
        steps,
        False,
        describe_corpus(CORPUS_NAME),
        state(),
        records,
        checkpoints,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    write_manifest(run_dir, body.to_dict(), identity_from_seed(b"\x07" * 32))
    return (run_dir / "manifest.json").stat().st_size


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _vm_hwm() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(reader: str, where: str) -> dict:
    """In this process: read the manifest at `where` (a directory or a URL) and report the peaks."""
    import tracemalloc

    from p2paudit.run.cache import BlobCache
    from p2paudit.run.manifest import read_manifest
    from p2paudit.run.remote import RemoteRun

    before = _vm_hwm()
    tracemalloc.start()
    if reader == "local":
        manifest = read_manifest(Path(where))
    else:
        with tempfile.TemporaryDirectory() as cache, RemoteRun(where, BlobCache(Path(cache), 1 << 30)) as remote:
            manifest = remote.manifest
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"steps": manifest.num_steps, "traced_peak": peak, "rss_peak": _vm_hwm(), "rss_before": before}


def _child(reader: str, where: str) -> dict:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[3]); import manifest_bench as b; "
        "print(json.dumps(b.measure(sys.argv[1], sys.argv[2])))"
    )
    here = str(Path(__file__).resolve().parent)
    done = subprocess.run([sys.executable, "-c", code, reader, where, here], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{reader} reader failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4500)
    args = parser.parse_args()
    from p2paudit.run.manifest import manifest_memory

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        size = write_signed_manifest(root / "run", args.steps)
        handler = functools.partial(_QuietHandler, directory=str(root))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            results = {
                "local": _child("local", str(root / "run")),
                "http": _child("http", f"http://127.0.0.1:{server.server_address[1]}/run"),
            }
        finally:
            server.shutdown()
    mib = 1024 * 1024
    print(f"manifest: {args.steps} steps of tiny, {size / mib:.1f} MiB; estimate {manifest_memory(size) / mib:.0f} MiB")
    for name, r in results.items():
        grown = r["rss_peak"] - r["rss_before"]
        print(
            f"{name:>5}: traced peak {r['traced_peak'] / mib:7.1f} MiB ({r['traced_peak'] / size:.2f}x the manifest), "
            f"resident peak {r['rss_peak'] / mib:7.1f} MiB (+{grown / mib:.1f} MiB while reading, {grown / size:.2f}x)"
        )


if __name__ == "__main__":
    main()
