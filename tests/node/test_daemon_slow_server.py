"""No slow or hostile server stalls a daemon (issue 19, item 1).

The servers are real (tests/slow_http.py on 127.0.0.1): one trickles a run's signature a byte at a time,
another stalls every shard and checkpoint of its run. A daemon serves peers (its libp2p port accepts
connections) within seconds while its manifest trickles, stops within seconds on SIGINT, SIGTERM or
--duration (real processes, real signals), and audits a healthy run while another run's server stalls.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

import p2paudit.node.daemon.daemon as daemon_module
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.queries import coverage
from p2paudit.attest.store import AttestationStore
from p2paudit.audit.replay import open_run
from p2paudit.identity import identity_from_seed
from p2paudit.node.assign.auditor import AuditPolicy
from p2paudit.node.daemon.daemon import DaemonConfig
from p2paudit.node.daemon.run import run_daemon
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE
from p2paudit.run.publisher import TrainPlan, publish_run
from tests.slow_http import SlowServer, serving_port

PUBLISHER = identity_from_seed(b"\x71" * 32)
SERVE_WITHIN_S = 30.0  # from the process's start, imports included (a loaded 2-core machine)
STOP_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    """Two runs with different ids (4 and 3 steps), each under its own root as <root>/run."""
    root = tmp_path_factory.mktemp("slow_served")
    publish_run(
        # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
        TrainPlan(root / "a" / "run", "tiny", steps=4, ckpt_every=2, backend="reference", arithmetic=1),
        PUBLISHER,
    )
    publish_run(
        TrainPlan(root / "b" / "run", "tiny", steps=3, ckpt_every=1, backend="reference", arithmetic=1), PUBLISHER
    )
    return root / "a" / "run", root / "b" / "run"


def _listening_port(home: Path, proc: subprocess.Popen, timeout: float) -> tuple[int, float]:
    try:
        return serving_port(home, proc, timeout)
    except RuntimeError as exc:
        raise AssertionError(str(exc)) from None


@pytest.mark.slow
@pytest.mark.serial  # stops within 5 s: run alone (tests/conftest.py)
@pytest.mark.timeout(180)
@pytest.mark.parametrize("how, code", [("SIGINT", 130), ("SIGTERM", 143), ("duration", 0)])
def test_a_trickling_manifest_neither_delays_serving_peers_nor_stopping(runs, tmp_path, how, code):
    run_a, _ = runs
    # The signature, one byte every 0.5 s: about 3 minutes for the file, never 60 s silent.
    with SlowServer(run_a, {SIGNATURE_FILE: "trickle-head"}, gap=0.5) as server:
        env = {"P2PAUDIT_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
        cmd = [sys.executable, "-m", "p2paudit", "daemon", "--run", server.url, "--backend", "reference", "--quiet"]
        if how == "duration":
            cmd += ["--duration", "8"]
        began = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, serving = _listening_port(tmp_path, proc, SERVE_WITHIN_S)
            status = json.loads((tmp_path / "status.json").read_text())
            assert [r["url"] for r in status["remote"]] == [server.url]  # still opening: no run id yet
            assert status["remote"][0]["run_id"] is None
            wait_until = time.monotonic() + 10.0
            while not server.paths() and time.monotonic() < wait_until:
                time.sleep(0.05)
            assert server.paths() == [SIGNATURE_FILE]  # asked for, and trickling still
            if how != "duration":
                asked = time.monotonic()
                proc.send_signal(getattr(signal, how))
            else:
                asked = began + 8.0
            out, err = proc.communicate(timeout=60)
            stopped = time.monotonic()
        finally:
            proc.kill()
    assert proc.returncode == code, err[-2000:]
    assert stopped - asked < STOP_WITHIN_S + (3.0 if how == "duration" else 0.0), f"took {stopped - asked:.1f} s"
    assert MANIFEST_FILE not in server.paths()
    print(f"served peers {serving - began:.2f} s after start; stopped {stopped - asked:.2f} s after {how}")


def _covered(ledger: Path, run_id: bytes) -> dict[int, int]:
    store = AttestationStore.open_readonly(ledger)
    try:
        assert store.ledger.verify().ok
        return {item.step: item.checked for item in coverage(store, run_id).per_step if item.checked}
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_stalled_run_does_not_starve_a_healthy_one(runs, tmp_path):
    run_a, run_b = runs
    stalled_paths = {p.relative_to(run_b).as_posix(): "stall" for p in run_b.rglob("*") if p.is_file()}
    for name in (MANIFEST_FILE, SIGNATURE_FILE):
        del stalled_paths[name]  # the run opens; every shard and checkpoint then stalls
    events = []
    # The healthy run's signature comes in about 2 s, so the stalled run's fetches start first: the two runs
    # share blobs (the same corpus shards, the same initial state), which the stalled server then holds.
    healthy_behaviors = {SIGNATURE_FILE: "trickle"}
    with SlowServer(run_b, stalled_paths) as stalled, SlowServer(run_a, healthy_behaviors, gap=0.005) as healthy:
        config = DaemonConfig(
            runs=(),
            urls=(stalled.url, healthy.url),  # the stalled run first: the old daemon always tried it first
            ledger_path=tmp_path / "ledger.db",
            status_path=tmp_path / "status.json",
            backend="reference",
            policy=AuditPolicy(redundancy=1, scratch_dir=tmp_path / "scratch"),
            cache_dir=tmp_path / "cache",
            fetch_timeout=30.0,  # a stalled request holds for 30 s, longer than the old daemon's whole budget
            duration=60.0,  # room for one failed open of the healthy run and its retry on a loaded machine (CI)
        )
        began = time.monotonic()
        trio.run(run_daemon, identity_from_seed(b"\x72" * 32), config, events.append)
        took = time.monotonic() - began
    told = "\n".join(e.text for e in events)
    try:
        healthy_steps = _covered(tmp_path / "ledger.db", open_run(run_a).manifest.run_id)
    except AttestationError as e:
        raise AssertionError(f"{e}; the daemon told:\n{told}") from e
    assert healthy_steps == {step: 1 for step in range(4)}, told
    assert _covered(tmp_path / "ledger.db", open_run(run_b).manifest.run_id) == {}
    assert took < 60.0 + STOP_WITHIN_S, f"stopped after {took:.1f} s"
    assert any(p.startswith("checkpoints/") or p.startswith("shards/") for p in stalled.paths())


def _daemon_events(config: DaemonConfig) -> list[str]:
    events = []
    trio.run(run_daemon, identity_from_seed(b"\x75" * 32), config, events.append)
    return [e.text for e in events]


def _config(tmp_path: Path, urls: tuple[str, ...], duration: float, **kw) -> DaemonConfig:
    return DaemonConfig(
        runs=(),
        urls=urls,
        ledger_path=tmp_path / "ledger.db",
        status_path=tmp_path / "status.json",
        backend="reference",
        policy=AuditPolicy(redundancy=1, scratch_dir=tmp_path / "scratch"),
        cache_dir=tmp_path / "cache",
        fetch_timeout=5.0,
        duration=duration,
        **kw,
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_daemon_checks_publisher_from_the_signature_before_fetching_anything_else(runs, tmp_path):
    run_a, _ = runs
    other = identity_from_seed(b"\x76" * 32).public_key
    with SlowServer(run_a) as server:
        texts = _daemon_events(_config(tmp_path, (server.url,), 3.0, publishers=frozenset([other])))
    refusals = [t for t in texts if "not by the expected publisher" in t]
    assert refusals and all(server.url + SIGNATURE_FILE in t and other.hex() in t for t in refusals), texts
    assert set(server.paths()) == {SIGNATURE_FILE}  # neither the manifest nor any shard or checkpoint


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_run_whose_fetches_keep_failing_backs_off_doubling_to_a_bound(runs, tmp_path, monkeypatch):
    run_a, _ = runs
    monkeypatch.setattr(daemon_module, "STEP_RETRY_MIN", 1.0)
    monkeypatch.setattr(daemon_module, "STEP_RETRY_MAX", 4.0)
    served = tmp_path / "served"
    shutil.copytree(run_a, served)
    shutil.rmtree(served / "checkpoints")  # the run opens; every step's checkpoint is then a 404
    with SlowServer(served) as server:
        texts = _daemon_events(_config(tmp_path, (server.url,), 14.0))
    delays = [int(t.rsplit("retry in ", 1)[1].rstrip("s")) for t in texts if "not replayed" in t]
    assert all("404" in t for t in texts if "not replayed" in t), texts
    # One run, one back-off: 1, 2, 4, then 4 s at most between tries (the old daemon tried every step
    # at once, each with its own 30 s back-off).
    assert delays[:4] == [1, 2, 4, 4][: len(delays)] and 3 <= len(delays) <= 6, delays
    assert all(d <= 4 for d in delays), delays
