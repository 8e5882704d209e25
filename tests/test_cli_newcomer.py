"""The CLI a newcomer meets: `status` says how to start a daemon when none runs."""

from __future__ import annotations

import subprocess
import sys
import time

from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.node.status import Status, write_status

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
