"""A daemon under a gossip flood: the event loop's longest stall, its CPU and memory, what it stored.

One `p2paudit daemon` process on a published tiny run (--steps steps) and one
flooding peer in this process (the real libp2p adapter, its own key). The
flooder publishes --messages gossip batches of 256 valid attestations each
(fresh keys, real steps of the run: they pass every check and are stored),
as fast as the daemon's per-origin limit lets them through (100 messages/s,
burst 1,000). Read from the daemon: its status file's health (the longest
trio task step in the last 60 s, the store owner's busiest job), its CPU
time (/proc/PID/stat) and peak resident memory (VmHWM), and its ledger size.
Baseline in the same run: the same daemon idle for the same time before the
flood.

    python benchmarks/flood_bench.py                 # 400 batches of 256
    python benchmarks/flood_bench.py --messages 100  # quicker
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402
from synthetic_attestations import synthetic_attestation  # noqa: E402

from p2paudit.audit.replay import open_run  # noqa: E402
from p2paudit.identity import identity_from_seed  # noqa: E402
from p2paudit.node import wire  # noqa: E402
from p2paudit.node.net import NodeConfig, open_node  # noqa: E402
from p2paudit.run.publisher import TrainPlan, publish_run  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def vm_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def status(home: Path) -> dict:
    return json.loads((home / "status.json").read_text())


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def make_batches(run_id: bytes, steps: int, messages: int) -> list[bytes]:
    out = []
    n = 0
    for m in range(messages):
        envelopes = []
        for _ in range(wire.MAX_BATCH):
            key = identity_from_seed(hashlib.sha256(b"flood key %d" % n).digest())
            envelopes.append(synthetic_attestation(key, run_id, n % steps, n).encoded)
            n += 1
        out.extend(wire.batches(run_id, envelopes))
    return out


async def flood(addr: str, topic: str, messages: list[bytes], home: Path, want: int) -> float:
    config = NodeConfig(listen=("/ip4/127.0.0.1/tcp/0",), peer_exchange_interval=3600, origin_rate=None)
    async with open_node(identity_from_seed(b"\x70" * 32), config) as node:
        await node.subscribe(topic, lambda origin, data: None)
        target = await node.connect(addr)
        with trio.fail_after(30):
            while target not in node.gossip_peers(topic):
                await trio.sleep(0.1)
        await trio.sleep(2.0)
        began = time.monotonic()
        for k, message in enumerate(messages):
            await node.publish(topic, message)
            if k % 100 == 99:  # the daemon's per-origin limit: 100 messages/s after a burst of 1,000
                await trio.sleep(1.0)
        took = time.monotonic() - began
        # Stay until the daemon has them: publish() only queues, and a node that leaves drops its queue.
        with trio.move_on_after(120):
            while status(home)["received"] < want:
                await trio.sleep(0.5)
        return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--idle", type=float, default=15.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        publish_run(
            TrainPlan(run, "tiny", steps=args.steps, ckpt_every=args.steps, backend="cpu"),
            identity_from_seed(b"\x71" * 32),
        )
        run_id = open_run(run).manifest.run_id
        messages = make_batches(run_id, args.steps, args.messages)
        home = Path(tmp) / "home"
        env = {**os.environ, "P2PAUDIT_HOME": str(home)}
        cmd = [sys.executable, "-m", "p2paudit", "daemon", "--run", str(run), "--redundancy", "1"]
        log = open(Path(tmp) / "daemon.log", "w")
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 120
            while not (home / "status.json").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(args.idle)  # start-up done, its own steps audited: the idle baseline
            idle = status(home)["health"]
            cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
            want = len(messages) * wire.MAX_BATCH
            took = trio.run(flood, status(home)["listen"][0], wire.run_topic(run_id), messages, home, want)
            time.sleep(2.0)
            busy = status(home)
            cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
            hwm = vm_kib(proc.pid, "VmHWM")
        finally:
            proc.terminate()
            proc.wait(30)
        print(f"CPU: {cpu_name()}, {os.cpu_count()} cores, python {platform.python_version()}")
        print(
            f"flood: {len(messages)} batches of {wire.MAX_BATCH} attestations ({sum(map(len, messages)):,} bytes) in {took:.1f} s"
        )
        print(f"daemon stored {busy['received']:,} of {want:,} attestations; ledger size {busy['ledger']['size']:,}")
        print(
            f"event loop longest stall, last 60 s: idle {idle['longest_stall_last_60s_ms']:.1f} ms, "
            f"flood {busy['health']['longest_stall_last_60s_ms']:.1f} ms (task {busy['health']['stall_task'][-60:]})"
        )
        print(
            f"store owner: {busy['health']['store_jobs']:,} jobs, busiest {busy['health']['busiest_store_job_ms']:.1f} ms"
        )
        print(
            f"daemon CPU during the flood: {cpu1 - cpu0:.1f} s over {t1 - t0:.1f} s ({(cpu1 - cpu0) / (t1 - t0) * 100:.0f} % of a core)"
        )
        print(f"daemon peak resident memory: {hwm / 1024:.1f} MiB")
        print(f"exit code on SIGTERM: {proc.returncode}")
        text = (Path(tmp) / "daemon.log").read_text(errors="replace")
        kinds = ("rate_limited", "rejected", "refused", "received", "conflict", "banned", "contained")
        print("daemon log lines: " + ", ".join(f"{k} {text.count(' ' + k)}" for k in kinds))


if __name__ == "__main__":
    main()
