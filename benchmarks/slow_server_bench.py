"""A daemon against slow and hostile run servers (issue 19, item 1): the figures for docs/benchmarks.md.

    .venv/bin/python benchmarks/slow_server_bench.py [--repeat 3] [--duration 60]

1. start to serving peers while the manifest trickles: a real `p2paudit daemon --run URL` process whose
   server (tests/slow_http.py, 127.0.0.1) sends manifest.sig.json one byte every 0.5 s; the time from the
   process's start until its status file lists its libp2p port and that port accepts a TCP connection;
2. stop on SIGINT during that fetch: the time from the signal to the process's exit (exit code 130);
3. steps audited from a healthy run while another run's server stalls every shard and checkpoint: one
   daemon (in this process, run_daemon) given both URLs, the stalled one first, for --duration seconds;
   how many of the healthy run's steps it signed, and of the stalled run's; beside it, the baseline of
   the same daemon given the healthy URL alone for as long (the ratio is the figure).
"""

from __future__ import annotations

import argparse
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402

from p2paudit.attest.queries import coverage  # noqa: E402
from p2paudit.attest.store import AttestationStore  # noqa: E402
from p2paudit.identity import identity_from_seed  # noqa: E402
from p2paudit.node.assign.auditor import AuditPolicy  # noqa: E402
from p2paudit.node.daemon.daemon import DaemonConfig  # noqa: E402
from p2paudit.node.daemon.run import run_daemon  # noqa: E402
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE, read_manifest  # noqa: E402
from p2paudit.run.publisher import TrainPlan, publish_run  # noqa: E402
from tests.slow_http import SlowServer, serving_port  # noqa: E402

PUBLISHER = identity_from_seed(b"\x73" * 32)


def serve_and_stop(run: Path, home: Path) -> tuple[float, float, int]:
    """(seconds from start to serving peers, seconds from SIGINT to exit, exit code) with a trickling manifest."""
    with SlowServer(run, {SIGNATURE_FILE: "trickle-head"}, gap=0.5) as server:
        cmd = [sys.executable, "-m", "p2paudit", "daemon", "--run", server.url, "--backend", "reference", "--quiet"]
        env = {"P2PAUDIT_HOME": str(home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[1])}
        began = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            serving = _wait_serving(home, proc) - began
            asked = time.monotonic()
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=60)
            return serving, time.monotonic() - asked, proc.returncode
        finally:
            proc.kill()


def _wait_serving(home: Path, proc: subprocess.Popen, timeout: float = 120.0) -> float:
    try:
        return serving_port(home, proc, timeout)[1]
    except RuntimeError as exc:
        raise SystemExit(str(exc)) from None


def healthy_beside_stalled(
    healthy: Path, stalled: Path, work: Path, duration: float, with_stalled: bool = True
) -> tuple[int, int, int, int]:
    """(healthy steps signed, its step count, stalled steps signed, its step count) over `duration` seconds."""
    stalls = {p.relative_to(stalled).as_posix(): "stall" for p in stalled.rglob("*") if p.is_file()}
    for name in (MANIFEST_FILE, SIGNATURE_FILE):
        del stalls[name]
    with SlowServer(stalled, stalls) as bad, SlowServer(healthy) as good:
        config = DaemonConfig(
            runs=(),
            urls=(bad.url, good.url) if with_stalled else (good.url,),
            ledger_path=work / "ledger.db",
            status_path=work / "status.json",
            backend="reference",
            policy=AuditPolicy(redundancy=1, scratch_dir=work / "scratch"),
            cache_dir=work / "cache",
            fetch_timeout=60.0,
            duration=duration,
        )
        trio.run(run_daemon, identity_from_seed(b"\x74" * 32), config, lambda event: None)
    store = AttestationStore.open_readonly(work / "ledger.db")
    try:
        counts = []
        for run in (healthy, stalled):
            m = read_manifest(run)
            known = store.conn.execute("SELECT 1 FROM attest_runs WHERE run_id = ?", (m.run_id,)).fetchone()
            done = sum(1 for s in coverage(store, m.run_id).per_step if s.checked) if known else 0
            counts += [done, m.num_steps]
    finally:
        store.close()
    return counts[0], counts[1], counts[2], counts[3]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--duration", type=float, default=60.0)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, python {platform.python_version()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        publish_run(TrainPlan(root / "a" / "run", "tiny", steps=40, ckpt_every=2, backend="reference"), PUBLISHER)
        publish_run(TrainPlan(root / "b" / "run", "tiny", steps=3, ckpt_every=1, backend="reference"), PUBLISHER)
        for i in range(args.repeat):
            serving, stop, code = serve_and_stop(root / "a" / "run", root / f"home{i}")
            print(
                f"trickling manifest: serving peers {serving:.2f} s after start; SIGINT to exit {stop:.2f} s (exit {code})"
            )
        for with_stalled in (False, True):
            work = root / ("both" if with_stalled else "alone")
            work.mkdir()
            got, steps, stalled_got, stalled_steps = healthy_beside_stalled(
                root / "a" / "run", root / "b" / "run", work, args.duration, with_stalled
            )
            beside = f"beside a stalled run ({stalled_got} of its {stalled_steps} steps)" if with_stalled else "alone"
            print(f"over {args.duration:.0f} s: {got} of the healthy run's {steps} steps audited, {beside}")


if __name__ == "__main__":
    main()
