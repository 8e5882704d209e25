"""`p2paudit explore`, `daemon --http`'s server, `ledger check-proof`, `ledger coverage --png` at 100,000 steps,
and the SQL views a writer leaves in the ledger."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import click
import pytest
import sqlite_utils
from click.testing import CliRunner

from p2paudit.attest.store import AttestationStore
from p2paudit.attest.views import VIEWS, create_views, missing_views
from p2paudit.cli import cli
from p2paudit.cli.explore_cmd import read_saved_overviews, saved_overviews_path, serve_explorer
from p2paudit.errors import InputError
from p2paudit.explorer.api import Explorer
from p2paudit.explorer.server import parse_listen
from tests.explorer.conftest import fetch
from tests.explorer.explorer_helpers import BIG, BIG_EVERY, BIG_STEPS, SMALL


def run(tmp_path, *args):
    return CliRunner().invoke(cli, list(args), env={"P2PAUDIT_HOME": str(tmp_path / "home")})


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize("listen", ["8321", "127.0.0.1", "127.0.0.1:99999", "example.com:80", "127.0.0.1:x"])
def test_explore_refuses_a_bad_listen_address(built, tmp_path, listen):
    assert "listen address" in one_line_error(
        run(tmp_path, "explore", "--listen", listen, "--ledger", str(built.path)), 2
    )


def test_explore_refuses_a_missing_or_unreadable_ledger(tmp_path):
    assert "no ledger at" in one_line_error(run(tmp_path, "explore", "--ledger", str(tmp_path / "none.db")), 2)
    junk = tmp_path / "junk.db"
    junk.write_text("not a database at all, just text " * 100)
    assert "not a p2paudit ledger" in one_line_error(run(tmp_path, "explore", "--ledger", str(junk)), 2)


def test_explore_warns_off_loopback_and_ctrl_c_is_130(built, tmp_path, monkeypatch):
    class Server:  # binds nothing: only what explore does around it is under test
        server_address = ("0.0.0.0", 8321)
        url = "http://0.0.0.0:8321/"
        explorer = Explorer(built.path)  # the real API (its overviews are saved when explore ends)
        warming = threading.Thread(target=lambda: None)
        warming.start()

        def serve_forever(self):
            raise KeyboardInterrupt

        def server_close(self):
            pass

    monkeypatch.setattr("p2paudit.explorer.server.make_server", lambda *args, **kwargs: Server())
    result = run(tmp_path, "explore", "--listen", "0.0.0.0:8321", "--ledger", str(built.path))
    assert result.exit_code == 130
    assert "warning: the explorer listens on 0.0.0.0:8321, not on loopback" in result.output
    assert parse_listen("[::1]:0") == ("::1", 0)
    with pytest.raises(InputError):
        parse_listen("[::1]")


@pytest.mark.slow
def test_explore_serves_and_sigint_exits_130(built, tmp_path):
    process = subprocess.Popen(
        [sys.executable, "-m", "p2paudit", "explore", "--listen", "127.0.0.1:0", "--ledger", str(built.path)],
        env={**os.environ, "P2PAUDIT_HOME": str(tmp_path / "home")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline()
        assert line.startswith("explorer at http://127.0.0.1:"), line + process.stderr.read()
        url = line.split()[2]
        with __import__("urllib.request").request.urlopen(url + "api/v1/runs", timeout=20) as reply:
            assert len(json.load(reply)["runs"]) == 2
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_daemon_http_serves_until_the_command_ends_and_saves_its_overviews(built, tmp_path, monkeypatch):
    monkeypatch.setenv("P2PAUDIT_HOME", str(tmp_path / "home"))
    with click.Context(cli):
        server = serve_explorer("127.0.0.1:0", built.path, built.status_path)
        assert fetch(server, "/api/v1/node").json()["available"]
        server.warming.join()
    with pytest.raises(OSError):  # closed with the command's context
        fetch(server, "/api/v1/runs")
    assert serve_explorer(None, built.path, None) is None  # no --http: nothing
    saved = saved_overviews_path(built.path)
    assert saved.parent == tmp_path / "home" / "cache" / "explorer"
    assert {s["run_id"] for s in json.loads(saved.read_text())["strips"]} == {SMALL.hex(), BIG.hex()}
    assert Explorer(built.path).overviews.restore_from(read_saved_overviews(saved)) == 2  # what the next start reads
    saved.write_text("{not json")  # a broken cache costs only speed
    with click.Context(cli):
        assert fetch(serve_explorer("127.0.0.1:0", built.path, None), "/api/v1/runs").status == 200


def test_check_proof_offline(server, built, tmp_path):
    proof = tmp_path / "proof.json"
    proof.write_bytes(fetch(server, "/api/v1/entries/20/proof?download=1").body)
    result = run(tmp_path, "ledger", "check-proof", str(proof), "--key", built.owner.public_key.hex())
    assert result.exit_code == 0 and "ok: entry 20 is in the tree of size 26" in result.output
    assert "signed by p2paudit.dev/ledger/" in result.output
    data = json.loads(proof.read_text())
    data["proof"][0] = "00" * 32
    proof.write_text(json.dumps(data))
    assert "does not verify" in one_line_error(run(tmp_path, "ledger", "check-proof", str(proof)), 1)
    proof.write_text("{")
    assert "not JSON" in one_line_error(run(tmp_path, "ledger", "check-proof", str(proof)), 2)
    printed = run(tmp_path, "ledger", "proof", "--index", "5", "--json", "--ledger", str(built.path))
    proof.write_text(printed.output)
    result = run(tmp_path, "ledger", "check-proof", str(proof))
    assert result.exit_code == 0 and "root NOT signed" in result.output


@pytest.mark.serial  # under 30 s: run alone (tests/conftest.py)
def test_coverage_png_of_100000_steps(built, tmp_path):
    png = tmp_path / "coverage.png"
    began = time.monotonic()
    result = run(tmp_path, "ledger", "coverage", "--run", BIG.hex(), "--png", str(png), "--ledger", str(built.path))
    assert result.exit_code == 0, result.output
    assert time.monotonic() - began < 30
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_views_made_by_the_writer_open_in_sqlite_utils(built):
    db = sqlite_utils.Database(sqlite3.connect(f"file:{built.path}?mode=ro", uri=True))
    assert set(VIEWS) <= set(db.view_names())
    assert db.execute("SELECT COUNT(*) FROM disputes").fetchone()[0] == 5
    per_step = db.execute("SELECT COUNT(*), SUM(checked) FROM coverage_per_step WHERE run_id = ?", [BIG.hex()])
    assert per_step.fetchone() == (BIG_STEPS // BIG_EVERY, 2 * BIG_STEPS // BIG_EVERY + 1)
    row = next(db.query("SELECT * FROM attestations WHERE subject = 'init' AND verdict = 'mismatch'"))
    assert row["run_id"] == SMALL.hex() and row["observed_output_digest"].startswith("sha256:")
    heads = list(db.query("SELECT size, signer FROM checkpoint_heads WHERE kind = 'own' ORDER BY id"))
    assert [h["size"] for h in heads] == [26, 8027]


def test_a_ledger_without_views_is_still_explored(built, tmp_path):
    old = tmp_path / "old.db"
    shutil.copy(built.path, old)
    with sqlite3.connect(old) as conn:  # a ledger written before the views existed
        for name in VIEWS:
            conn.execute(f"DROP VIEW {name}")
    with AttestationStore.open_readonly(old) as store:
        assert missing_views(store.conn) == list(VIEWS)
        create_views(store.conn, temp=True)  # what a reader may do on its read-only connection
        assert store.conn.execute("SELECT COUNT(*) FROM disputes").fetchone()[0] == 5
    result = run(tmp_path, "ledger", "coverage", "--run", SMALL.hex(), "--ledger", str(old), "--json")
    assert result.exit_code == 0 and missing_views(sqlite3.connect(old)) == list(VIEWS)  # readers wrote nothing
    from p2paudit.explorer.api import Explorer

    answer = Explorer(old).answer(f"/runs/{SMALL.hex()}/coverage", {"buckets": "5"})
    assert answer.status == 200 and json.loads(answer.body)["totals"]["disputed_steps"] == 3
    with AttestationStore.open(old):  # the next writer adds them
        pass
    assert missing_views(sqlite3.connect(old)) == []
    assert os.path.getsize(old) > 0
