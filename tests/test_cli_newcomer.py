"""The CLI a newcomer meets: `status` says how to start a daemon when none runs; a closed pipe ends quietly."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.cli import cli
from p2paudit.node.daemon.status import Status, write_status

sys.path.insert(0, str(Path(__file__).resolve().parent / "attest"))
from attest_helpers import RUN, key, make_signed  # noqa: E402

START = "start one with: p2paudit daemon --run RUN_DIR|URL"


def test_status_with_no_daemon_ever_says_how_to_start_one(tmp_path):
    result = CliRunner().invoke(cli, ["status"], env={"P2PAUDIT_HOME": str(tmp_path)})
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: no daemon has run in {tmp_path}") and START in line and "p2paudit demo" in line


def test_status_of_a_daemon_that_ended_says_so_and_how_to_start_one(tmp_path):
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(ended.stdout)  # that process has exited: its status file is a dead daemon's
    write_status(
        tmp_path / "status.json",
        Status(pid, time.time(), "12D3KooWMe", "00", [], [], {"path": "l", "size": 0}, 0, 0, None, [], 0, [], {}, []),
    )
    result = CliRunner().invoke(cli, ["status"], env={"P2PAUDIT_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "(not running, status" in lines[0]
    assert (
        lines[1].startswith("no daemon is running in this home; the last one's status follows.") and START in lines[1]
    )


@pytest.fixture(scope="module")
def long_ledger(tmp_path_factory) -> Path:
    """A ledger whose `coverage` (3,000 steps) and `show --step 0` (1,000 keys) each print far more than a pipe holds."""
    path = tmp_path_factory.mktemp("long") / "ledger.db"
    with AttestationStore.open(path, origin_for(key(0).public_key)) as store:
        store.register_run(RUN, 3000, "long", None)
        store.append_many([make_signed(key(1), step=step).encoded for step in range(3000)])
        store.append_many([make_signed(key(n), step=0).encoded for n in range(2, 1002)])
    return path


@pytest.mark.slow  # a real process and a real pipe
@pytest.mark.parametrize("command", ["ledger coverage", "ledger show --step 0"])
def test_a_closed_pipe_ends_quietly(long_ledger, tmp_path, command):
    err = tmp_path / "stderr.txt"
    pipeline = (
        f"{shlex.quote(sys.executable)} -m p2paudit {command} --ledger {shlex.quote(str(long_ledger))} "
        f"2>{shlex.quote(str(err))} | head -1; exit ${{PIPESTATUS[0]}}"
    )
    done = subprocess.run(["bash", "-c", pipeline], capture_output=True, text=True, timeout=120)
    assert err.read_text() == ""  # no traceback, no "Exception ignored", no error line
    assert len(done.stdout.splitlines()) == 1
    assert done.returncode == 141, done  # 128 + SIGPIPE, as a shell reports a tool stopped by a closed pipe
