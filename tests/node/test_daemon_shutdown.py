"""Prompt shutdown (issue 12): SIGINT, SIGTERM and --duration stop a daemon within 5 s even mid-replay.

The run is a one-step tiny model with 512 micro-batches, so the daemon's replay of it with the reference
backend takes tens of seconds here (publishing it with the cpu backend takes a few). Each daemon is a real
process; the test waits until its status file says it is replaying, stops it, and times the exit. The
ledger is then opened read-only: it verifies, and its last signed checkpoint covers every entry.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from p2paudit.attest.store import AttestationStore
from p2paudit.identity import identity_from_seed
from p2paudit.run.publisher import TrainPlan, publish_run

PUBLISHER = identity_from_seed(b"\x67" * 32)
STOP_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("slow") / "run"
    publish_run(TrainPlan(run, "tiny", steps=1, micro_batches=512, ckpt_every=1, backend="cpu"), PUBLISHER)
    return run


def _start(home: Path, run: Path, *extra: str) -> subprocess.Popen:
    env = {"P2PAUDIT_HOME": str(home), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "p2paudit", "daemon", "--run", str(run), "--backend", "reference", "--quiet"]
    return subprocess.Popen([*cmd, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_busy(proc: subprocess.Popen, home: Path, timeout: float = 120.0) -> None:
    """Until the daemon's status says it is replaying a step (and has been for a second)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"daemon exited early ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        try:
            busy = json.loads((home / "status.json").read_text())["busy"]
        except (FileNotFoundError, ValueError, KeyError):
            busy = None
        if busy is not None:
            time.sleep(1.0)
            return
        time.sleep(0.1)
    raise AssertionError("the daemon never started replaying")


def _stopped_in(proc: subprocess.Popen, began: float) -> tuple[float, str, str]:
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return time.monotonic() - began, out, err


def _check_ledger(home: Path) -> None:
    store = AttestationStore.open_readonly(home / "ledger.db")
    try:
        assert store.ledger.verify().ok
        note = store.ledger.latest_checkpoint()
        assert note is not None, "no final checkpoint signed"
        assert int(note.splitlines()[1]) == store.ledger.size
        status = json.loads((home / "status.json").read_text())
        assert status["busy"] is None or status["ledger"]["size"] == store.ledger.size
        assert "signed a final checkpoint" in " ".join(status["events"])
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.serial  # stops within 5 s: run alone (tests/conftest.py)
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_mid_replay_stops_the_daemon_within_5_s(slow_run, tmp_path, sig, code):
    proc = _start(tmp_path, slow_run)
    try:
        _wait_busy(proc, tmp_path)
    except BaseException:
        proc.kill()  # a daemon that never replayed must not outlive the test
        raise
    began = time.monotonic()
    proc.send_signal(sig)
    took, out, err = _stopped_in(proc, began)
    assert proc.returncode == code, err[-2000:]
    assert took < STOP_WITHIN_S, f"took {took:.1f} s to stop"
    assert f"stopped by signal {int(sig)}" in out
    _check_ledger(tmp_path)


@pytest.mark.slow
@pytest.mark.serial  # stops within 5 s of its duration: run alone (tests/conftest.py)
@pytest.mark.timeout(300)
def test_duration_ending_mid_replay_stops_the_daemon_within_5_s(slow_run, tmp_path):
    duration = 8.0
    proc = _start(tmp_path, slow_run, "--duration", str(duration))
    try:
        _wait_busy(proc, tmp_path)  # replaying well before its duration ends, and for far longer than it
    except BaseException:
        proc.kill()
        raise
    first_status = json.loads((tmp_path / "status.json").read_text())["written_at"]
    _, _, err = _stopped_in(proc, time.monotonic())
    ended = time.time()
    assert proc.returncode == 0, err[-2000:]
    # The status loop starts the clock at its first write, which is at or before the first status seen.
    assert ended - first_status < duration + STOP_WITHIN_S, f"stopped {ended - first_status:.1f} s after start"
    _check_ledger(tmp_path)
