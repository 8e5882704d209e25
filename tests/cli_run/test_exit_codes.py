"""Exit codes: 1 only for a claim that did not match, 2 for bad input, 3 for the verifier's own failure."""

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.errors import EXIT_INTERNAL, EXIT_MISMATCH, EXIT_USAGE, InputError, InternalError, MismatchError
from p2paudit.identity import identity_from_seed, save_identity

PUBLISHER = identity_from_seed(b"\x24" * 32)


def _invoke(args, home: Path):
    return CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(home)})


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("exit")
    save_identity(PUBLISHER, base / "key.pem")
    result = _invoke(
        ["train", str(base / "run"), "--steps", "2", "--backend", "reference", "--key", str(base / "key.pem")],
        base / "home",
    )
    assert result.exit_code == 0, result.output
    return base / "run"


def test_the_codes_are_distinct_and_carried_by_one_base():
    assert (MismatchError.exit_code, InputError.exit_code, InternalError.exit_code) == (1, 2, 3)
    assert (EXIT_MISMATCH, EXIT_USAGE, EXIT_INTERNAL) == (1, 2, 3)


def test_a_crash_inside_the_verifier_is_exit_3_in_one_line_not_a_mismatch(small_run, tmp_path, monkeypatch):
    import p2paudit.audit.replay as replay

    def broken(*args, **kwargs):
        raise ZeroDivisionError("division by zero in a kernel")

    monkeypatch.setattr(replay, "digest_state", broken)
    result = _invoke(["verify-range", "1", "--run", str(small_run), "--backend", "reference"], tmp_path)
    assert result.exit_code == EXIT_INTERNAL
    last = result.output.strip().splitlines()[-1]
    assert "internal error" in last and "ZeroDivisionError" in last and "--debug" in last
    assert "Traceback" not in result.output


def test_debug_shows_the_traceback(small_run, tmp_path, monkeypatch):
    import p2paudit.audit.replay as replay

    monkeypatch.setattr(replay, "digest_state", lambda *a, **k: 1 / 0)
    result = _invoke(["--debug", "verify-range", "1", "--run", str(small_run), "--backend", "reference"], tmp_path)
    assert result.exit_code == EXIT_INTERNAL
    assert "Traceback" in result.output and "ZeroDivisionError" in result.output


def test_a_mismatch_exits_1_with_one_summary_line(small_run, tmp_path):
    import json

    from p2paudit.run.manifest import write_manifest

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    body = json.loads((run / "manifest.json").read_bytes())
    body["steps"][0]["loss"] = body["steps"][0]["loss"] + 1.0
    body["loss_curve"] = [s["loss"] for s in body["steps"]]
    write_manifest(run, body, PUBLISHER)
    result = _invoke(["verify-range", "0-1", "--run", str(run), "--backend", "reference"], tmp_path)
    assert result.exit_code == EXIT_MISMATCH, result.output
    assert "1 of 3 check(s) did not match the published claim" in result.output
    assert "loss" in result.output


@pytest.mark.parametrize(
    "text, message",
    [
        ("9" * 5000, "5000 characters"),
        ("\u0663", "ASCII decimal"),
        ("0-\uff11", "ASCII decimal"),
    ],
)
def test_hostile_ranges_exit_2_in_one_line(small_run, tmp_path, text, message):
    result = _invoke(["verify-range", text, "--run", str(small_run)], tmp_path)
    assert result.exit_code == EXIT_USAGE and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_replay_that_cannot_fit_is_refused_before_loading_unless_overridden(small_run, tmp_path, monkeypatch):
    from p2paudit.engine import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 2**20)  # 1 MiB: the tiny replay needs more
    refused = _invoke(["verify-range", "1", "--run", str(small_run), "--backend", "reference"], tmp_path)
    assert refused.exit_code == EXIT_USAGE
    assert "replaying a step of the run in" in refused.output and "1.00 MiB is available" in refused.output
    forced = _invoke(
        ["verify-range", "1", "--run", str(small_run), "--backend", "reference", "--ignore-memory-check"], tmp_path
    )
    assert forced.exit_code == 0, forced.output
