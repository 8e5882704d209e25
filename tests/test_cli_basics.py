"""The console command exists, answers --help and --version, and fails cleanly on a wrong flag."""

import subprocess
import sys

import pytest
from click.testing import CliRunner

from p2paudit import __version__
from p2paudit.cli import cli


def test_version_and_help():
    runner = CliRunner()
    result = runner.invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output


def test_unknown_flag_is_usage_error():
    result = CliRunner().invoke(cli, ["--no-such-flag"])
    assert result.exit_code == 2
    assert "no-such-flag" in result.output


def test_console_script_runs_in_a_fresh_process():
    out = subprocess.run([sys.executable, "-m", "p2paudit", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert __version__ in out.stdout


def test_subcommand_help_exits_zero_without_error():
    result = CliRunner().invoke(cli, ["ledger", "--help"])
    assert result.exit_code == 0, result.output
    assert "Error" not in result.output


@pytest.mark.slow  # 3 s (fast tier: pytest -m 'not slow')
def test_interrupted_command_exits_130_never_1(tmp_path):
    """SIGINT in the middle of real work (a reference-backend training run) is 130, not 1 ("did not match")."""
    import signal
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "p2paudit", "train", str(tmp_path / "run"), "--steps", "2000", "--backend", "reference"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "run").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        time.sleep(1.0)  # well inside the run
        assert proc.poll() is None, proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "Error: interrupted"
