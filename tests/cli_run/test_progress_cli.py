"""Progress within a step end to end: `verify-range --json` and `train --json` on a tiny run write progress
events on stderr (one JSON object a line) whose shares grow to 1.0 for every step, and stdout stays one document."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed
from p2paudit.run.publisher import TrainPlan, publish_run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("progress-cli") / "run"
    publish_run(TrainPlan(run_dir, "tiny", steps=2, ckpt_every=1, backend="cpu"), identity_from_seed(b"\x06" * 32))
    return run_dir


def progress_by_step(stderr: str) -> dict[int, list[float]]:
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    shares: dict[int, list[float]] = {}
    for event in events:
        if event["event"] == "progress":
            assert set(event) == {"event", "step", "phase", "fraction", "counts", "elapsed", "eta_seconds"}
            shares.setdefault(event["step"], []).append(event["fraction"])
    return shares


def test_verify_range_json_prints_progress_events_growing_to_one(tiny_run, tmp_path) -> None:
    args = ["verify-range", "0-1", "--run", str(tiny_run), "--backend", "reference", "--json"]
    result = CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["summary"]["match"] == 3  # init and two steps: stdout is one document
    shares = progress_by_step(result.stderr)
    assert sorted(shares) == [0, 1]
    for fractions in shares.values():
        assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_verify_range_in_a_pipe_adds_nothing(tiny_run, tmp_path) -> None:
    args = ["verify-range", "1", "--run", str(tiny_run), "--backend", "reference"]
    result = CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    assert result.stderr == ""  # no bar: stderr is no terminal here
    assert len(result.stdout.strip().splitlines()) == 2  # the step's line and the summary


def test_train_json_prints_step_and_progress_events(tmp_path) -> None:
    args = ["train", str(tmp_path / "run"), "--steps", "2", "--backend", "reference", "--json"]
    result = CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["steps"] == 2
    shares = progress_by_step(result.stderr)
    assert sorted(shares) == [0, 1] and all(f[-1] == 1.0 for f in shares.values())
    steps = [json.loads(line) for line in result.stderr.splitlines() if '"event": "step"' in line]
    assert [s["step"] for s in steps] == [0, 1]
