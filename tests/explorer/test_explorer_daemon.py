"""`daemon --http`: a real daemon process serves the explorer over its own ledger and status file, and still
stops on SIGINT with 130."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from p2paudit.identity import identity_from_seed
from p2paudit.run.publisher import TrainPlan, publish_run

PUBLISHER = identity_from_seed(b"\x68" * 32)


def _get(url: str):
    with urllib.request.urlopen(url, timeout=20) as reply:
        return json.load(reply)


def _explorer_url(proc: subprocess.Popen, deadline: float) -> str:
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"daemon exited ({proc.wait()}): {proc.stderr.read()[-2000:]}")
        if line.startswith("explorer at http://127.0.0.1:"):
            return line.split()[2]
    raise AssertionError("the daemon never said where its explorer is")


@pytest.mark.slow
def test_daemon_http_serves_its_ledger_and_status(tmp_path: Path):
    run = tmp_path / "run"
    publish_run(
        # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
        TrainPlan(run, "tiny", steps=2, micro_batches=1, ckpt_every=1, backend="reference", arithmetic=1),
        PUBLISHER,
    )
    home = tmp_path / "home"
    env = {"P2PAUDIT_HOME": str(home), "PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "p2paudit", "daemon", "--run", str(run), "--backend", "reference", "--quiet"]
    proc = subprocess.Popen(
        [*cmd, "--http", "127.0.0.1:0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        url = _explorer_url(proc, deadline)
        while True:  # the status file and the run's attestations arrive as the daemon works
            node = _get(url + "api/v1/node")
            runs = _get(url + "api/v1/runs")["runs"] if node["available"] else []
            if runs and runs[0]["totals"]["checked_steps"] == 2:
                break
            assert time.monotonic() < deadline, (node, runs)
            time.sleep(0.2)
        assert node["running"] is True and node["status"]["peer_id"].startswith("12D3KooW")
        step = _get(url + f"api/v1/runs/{runs[0]['run_id']}/steps/1")
        assert [a["verdict"] for a in step["attestations"]] == ["match"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        with pytest.raises(OSError):  # the explorer went with the daemon
            _get(url + "api/v1/runs")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
