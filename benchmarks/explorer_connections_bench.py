"""The explorer's server under idle connections: threads of a real `p2paudit explore` process while 200
connections are open and send nothing (or half a request), how long a normal request takes meanwhile, and
how long the server holds an idle connection before it closes it.

    python benchmarks/explorer_connections_bench.py               # 200 idle connections
    python benchmarks/explorer_connections_bench.py --idle 1000   # more (each is one file descriptor here)

It builds a small ledger in a temporary folder (a few hundred signed attestations) and serves it with the
`explore` command in a process of its own, so the threads counted are the server's alone (/proc/PID/status).
The server runs in the temporary folder, so it imports p2paudit from PYTHONPATH: set it to a checkout to
measure that checkout's server.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, then this folder

from synthetic_attestations import synthetic_attestation  # noqa: E402

from p2paudit.attest.store import AttestationStore, origin_for  # noqa: E402
from p2paudit.identity import identity_from_seed  # noqa: E402

RUN = hashlib.sha256(b"explorer connections benchmark run").digest()


def build(path: Path, steps: int = 100, keys: int = 3) -> None:
    ids = [identity_from_seed(hashlib.sha256(b"explorer connections key %d" % k).digest()) for k in range(keys)]
    with AttestationStore.open(path, origin_for(ids[0].public_key)) as store:
        store.register_run(RUN, steps, "connections benchmark")
        store.append_many(
            [synthetic_attestation(ids[n % keys], RUN, n // keys, n).encoded for n in range(steps * keys)]
        )
        store.checkpoint(ids[0])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError(f"no thread count for process {pid}")


def get(url: str) -> float:
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=60) as response:
        response.read()
    return time.perf_counter() - began


def wait_up(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            get(url)
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the explorer did not start (exit {process.poll()})") from None
            time.sleep(0.1)


def idle_close_seconds(port: int) -> float | None:
    """Seconds until the server closes a connection that sent half a head; None if not within 60 s."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(b"GET /api/v1/runs HTTP/1.0\r\n")
        began = time.perf_counter()
        try:
            sock.recv(1024)
        except TimeoutError:
            return None
        return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle", type=int, default=200, help="idle connections to hold open")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        ledger = Path(folder) / "ledger.db"
        build(ledger)
        port = free_port()
        env = {**os.environ, "P2PAUDIT_HOME": folder}
        command = [
            sys.executable,
            "-m",
            "p2paudit",
            "explore",
            "--listen",
            f"127.0.0.1:{port}",
            "--ledger",
            str(ledger),
        ]
        process = subprocess.Popen(command, env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}/api/v1/runs"
        try:
            wait_up(url, process)
            time.sleep(1)  # the overviews' warm-up thread has ended
            before = threads_of(process.pid)
            quiet = [get(url) for _ in range(20)]
            idle = [socket.create_connection(("127.0.0.1", port), timeout=60) for _ in range(args.idle)]
            for sock in idle[::2]:
                sock.sendall(b"GET /api/v1/runs HTTP/1.0\r\n")  # half a head
            time.sleep(0.5)
            loaded = [get(url) for _ in range(20)]  # answered after the idle ones were accepted (in order)
            during = threads_of(process.pid)
            for sock in idle:
                sock.close()
            close = idle_close_seconds(port)
        finally:
            process.terminate()
            process.wait(timeout=30)
        stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
    print(f"explorer process threads: {before} before, {during} with {args.idle} idle connections open")
    print(f"GET /api/v1/runs: median {1000 * statistics.median(quiet):.1f} ms quiet, "
          f"{1000 * statistics.median(loaded):.1f} ms with the idle connections open (max {1000 * max(loaded):.1f} ms)")  # fmt: skip
    print(
        "idle connection closed by the server after " + ("no close within 60 s" if close is None else f"{close:.2f} s")
    )
    print(f"tracebacks on the server's stderr: {stderr.count('Traceback')}")


if __name__ == "__main__":
    main()
