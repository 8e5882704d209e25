"""A daemon audits a run where it lives: on a web server (issue 13, item 1).

The server is the Python standard library's http.server (it ignores Range requests: checkpoints come
whole, which RemoteRun accepts and still checks tensor by tensor). Each test counts what the server
was asked for, and checks the daemon's ledger afterwards.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import trio

import p2paudit.node.daemon.daemon as daemon_module
from p2paudit.attest.queries import coverage
from p2paudit.attest.store import AttestationStore
from p2paudit.audit.replay import open_run
from p2paudit.identity import identity_from_seed
from p2paudit.node.assign.auditor import AuditPolicy
from p2paudit.node.daemon.daemon import DaemonConfig
from p2paudit.node.daemon.run import run_daemon
from p2paudit.node.daemon.sources import RemoteSource
from p2paudit.run.cache import BlobCache
from p2paudit.run.checkpoint import checkpoint_path
from p2paudit.run.publisher import TrainPlan, publish_run

PUBLISHER = identity_from_seed(b"\x6d" * 32)
STEPS = 4


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("served")
    publish_run(
        # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
        TrainPlan(root / "run", "tiny", steps=STEPS, ckpt_every=2, backend="reference", arithmetic=1),
        PUBLISHER,
    )
    return root


class Server:
    """http.server over `root`, recording every path asked for; `fail` maps a path suffix to how many
    more requests for it get a 503."""

    def __init__(self, root: Path) -> None:
        self.asked: list[str] = []
        self.fail: dict[str, int] = {}
        server = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.asked.append(self.path)
                for suffix, left in server.fail.items():
                    if self.path.endswith(suffix) and left > 0:
                        server.fail[suffix] = left - 1
                        self.send_error(503, "try later")
                        return
                super().do_GET()

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/run/"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _covered(ledger: Path, run_id: bytes) -> dict[int, int]:
    store = AttestationStore.open_readonly(ledger)
    try:
        assert store.ledger.verify().ok
        return {item.step: item.checked for item in coverage(store, run_id).per_step}
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_daemon_audits_a_run_served_over_http_fetching_only_what_steps_need(published, tmp_path):
    server = Server(published)
    try:
        cmd = [sys.executable, "-m", "p2paudit", "daemon", "--run", server.url, "--backend", "reference"]
        cmd += ["--redundancy", "1", "--until-covered", "--quiet"]
        env = {"P2PAUDIT_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=200)
    finally:
        server.close()
    assert done.returncode == 0, done.stderr[-2000:]
    run_id = open_run(published / "run").manifest.run_id
    assert _covered(tmp_path / "ledger.db", run_id) == {step: 1 for step in range(STEPS)}
    asked = {path.rsplit("/run/", 1)[-1] for path in server.asked}
    assert {"manifest.json", "manifest.sig.json"} <= asked
    assert not any(path.startswith("traces/") for path in asked)  # the daemon does not bisect traces
    manifest = open_run(published / "run").manifest
    assert {p for p in asked if p.startswith("checkpoints/")} == {checkpoint_path(c) for c in manifest.checkpoints}
    status = json.loads((tmp_path / "status.json").read_text())
    (remote,) = status["remote"]
    assert remote["url"] == server.url and remote["received_bytes"] > 0


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_server_that_fails_costs_one_line_and_a_retry_not_the_daemon(published, tmp_path, monkeypatch):
    monkeypatch.setattr(daemon_module, "STEP_RETRY_MIN", 0.5)
    server = Server(published)
    manifest = open_run(published / "run").manifest
    server.fail[checkpoint_path(sorted(manifest.checkpoints)[1])] = 3  # answers 503 three times
    events = []
    try:
        source = RemoteSource(server.url, BlobCache(tmp_path / "cache", 1 << 30), read_timeout=10.0)
        config = DaemonConfig(
            runs=(source,),
            ledger_path=tmp_path / "ledger.db",
            status_path=tmp_path / "status.json",
            backend="reference",
            policy=AuditPolicy(redundancy=1, scratch_dir=tmp_path / "scratch"),
            stop_when_covered=True,
            linger=1.0,
            duration=150.0,
        )
        trio.run(run_daemon, identity_from_seed(b"\x6e" * 32), config, events.append)
        source.close()
    finally:
        server.close()
    failures = [e.text for e in events if "not replayed" in e.text]
    assert failures and all("503" in text and "retry in" in text for text in failures), failures
    assert _covered(tmp_path / "ledger.db", manifest.run_id) == {step: 1 for step in range(STEPS)}
    assert any("every step is covered" in e.text for e in events)
