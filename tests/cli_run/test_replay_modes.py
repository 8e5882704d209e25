"""verify-range --replay: in memory, streaming, and auto (streams when in memory would not fit)."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import p2paudit.audit.streamed_replay as streamed_replay
import p2paudit.engine.memory as memory
from p2paudit.audit.streamed_replay import NO_BISECT
from p2paudit.cli import cli
from p2paudit.engine.memory import estimate_memory
from p2paudit.errors import EXIT_MISMATCH, EXIT_USAGE
from p2paudit.identity import identity_from_seed, save_identity
from p2paudit.run.manifest import read_manifest, write_manifest

PUBLISHER = identity_from_seed(b"\x25" * 32)


def _invoke(args, home: Path):
    return CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(home)})


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("modes")
    save_identity(PUBLISHER, base / "key.pem")
    args = ["train", str(base / "run"), "--steps", "3", "--ckpt-every", "3", "--key", str(base / "key.pem")]
    result = _invoke(args, base / "home")
    assert result.exit_code == 0, result.output
    return base / "run"


def _verify(run: Path, home: Path, *extra: str):
    result = _invoke(["verify-range", "0-2", "--run", str(run), "--json", *extra], home)
    return result, (json.loads(result.stdout) if result.stdout.lstrip().startswith("{") else None)


def _timeless(doc: dict) -> list:
    return [dict(a, seconds=0) for a in doc["audits"]]


def _pretend_available(monkeypatch, n: int) -> None:
    monkeypatch.setattr(memory, "available_bytes", lambda: n)
    monkeypatch.setattr(streamed_replay, "available_bytes", lambda: n)


def test_streaming_and_in_memory_print_the_same_audits(run, tmp_path):
    results = {mode: _verify(run, tmp_path, "--replay", mode) for mode in ("in-memory", "streaming")}
    for mode, (result, doc) in results.items():
        assert result.exit_code == 0, result.output
        assert doc["summary"]["replay"] == mode and doc["summary"]["match"] == 4
    assert _timeless(results["streaming"][1]) == _timeless(results["in-memory"][1])
    assert list((tmp_path / "scratch").iterdir()) == []  # the default scratch directory, emptied


def test_auto_streams_when_in_memory_would_not_fit_and_refuses_when_nothing_fits(run, tmp_path, monkeypatch):
    manifest = read_manifest(run)
    estimate = estimate_memory(manifest.config, manifest.data.tokens, manifest.data.token_bytes)
    assert estimate.streaming_replay < estimate.replay
    _pretend_available(monkeypatch, (estimate.streaming_replay + estimate.replay) // 2)
    result, doc = _verify(run, tmp_path, "--scratch-dir", str(tmp_path / "elsewhere"))
    assert result.exit_code == 0, result.output
    assert doc["summary"]["replay"] == "streaming"
    assert (tmp_path / "elsewhere").is_dir() and not (tmp_path / "scratch").exists()
    result, _ = _verify(run, tmp_path, "--replay", "in-memory")
    assert result.exit_code == EXIT_USAGE and "(in memory) needs about" in result.output
    _pretend_available(monkeypatch, estimate.streaming_replay // 2)
    result, _ = _verify(run, tmp_path)
    assert result.exit_code == EXIT_USAGE and "(streaming) needs about" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_streaming_runs_on_one_process_only(run, tmp_path):
    result, _ = _verify(run, tmp_path, "--replay", "streaming", "--world-size", "2")
    assert result.exit_code == EXIT_USAGE and "a streaming replay runs on one process" in result.output


def test_a_streamed_mismatch_exits_1_and_says_why_it_does_not_bisect(run, tmp_path):
    forged = tmp_path / "run"
    shutil.copytree(run, forged)
    body = json.loads((forged / "manifest.json").read_bytes())
    body["steps"][1]["loss"] = body["steps"][1]["loss"] + 1.0
    body["loss_curve"][1] = body["steps"][1]["loss"]
    body["steps"][1]["output"] = body["steps"][0]["output"]  # state 2 has no checkpoint
    write_manifest(forged, body, PUBLISHER)
    result = _invoke(["verify-range", "1-2", "--run", str(forged), "--replay", "streaming"], tmp_path)
    assert result.exit_code == EXIT_MISMATCH, result.output
    assert NO_BISECT in result.output and "streaming" in result.output
    assert "step 1: 58 tensor(s) differ" in result.output  # every param and moment (the step counters agree)


@pytest.mark.parametrize("command", ["verify-range", "train"])
def test_a_scratch_directory_that_cannot_be_used_is_one_line_exit_2(run, tmp_path, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    if command == "verify-range":
        args = ["verify-range", "0-2", "--run", str(run), "--replay", "streaming"]
    else:
        args = ["train", str(tmp_path / "new"), "--steps", "2", "--mode", "streaming"]
    result = _invoke([*args, "--scratch-dir", str(blocker / "scratch")], tmp_path)
    assert result.exit_code == EXIT_USAGE, result.output
    last = result.output.strip().splitlines()[-1]
    assert "scratch directory" in last and "cannot be used" in last and "Traceback" not in result.output
    assert blocker.read_text() == "not a directory"
