"""A streamed run (train --mode streaming) is byte for byte the in-memory run, resumes bit for bit, and
reaches the golden digest."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import p2paudit.run.publisher as publisher_module
from p2paudit.engine.config import train_config
from p2paudit.engine.memory import estimate_memory
from p2paudit.errors import InputError
from p2paudit.identity import save_identity
from p2paudit.run.golden import GOLDEN_TINY_DIGEST, GOLDEN_TINY_STEPS
from p2paudit.run.manifest import MANIFEST_FILE, read_manifest
from p2paudit.run.publisher import PROGRESS_FILE, TrainPlan, publish_run


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.slow  # 6.6 s for its 2 cases (fast tier: pytest -m 'not slow')
@pytest.mark.parametrize("spill", [False, True])
def test_a_streamed_run_is_the_in_memory_run_byte_for_byte(tmp_path, publisher, monkeypatch, spill):
    plan = dict(config="tiny", steps=5, ckpt_every=2, micro_batches=4, backend="cpu")
    publish_run(TrainPlan(tmp_path / "memory", **plan), publisher)
    if spill:  # room for the streamed step, not for its partial sums as well
        data = publisher_module.data_spec(None)
        estimate = estimate_memory(train_config("tiny", micro_batches=4, steps=5), data.tokens, data.token_bytes)
        monkeypatch.setattr(publisher_module, "available_bytes", lambda: estimate.streaming_replay + 1)
    scratch = tmp_path / "scratch"
    publish_run(TrainPlan(tmp_path / "streamed", **plan), publisher, mode="streaming", scratch_dir=scratch)
    assert _files(tmp_path / "streamed") == _files(tmp_path / "memory")
    assert list(scratch.iterdir()) == []


def test_auto_streams_only_when_the_step_would_not_fit(tmp_path, publisher, monkeypatch):
    data = publisher_module.data_spec(None)
    estimate = estimate_memory(train_config("tiny", steps=2), data.tokens, data.token_bytes)
    plan = TrainPlan(tmp_path / "run", "tiny", steps=2, backend="reference")
    chosen = []
    real = publisher_module.train_steps_streamed
    monkeypatch.setattr(publisher_module, "train_steps_streamed", lambda *a, **k: chosen.append(True) or real(*a, **k))
    monkeypatch.setattr(publisher_module, "available_bytes", lambda: estimate.train_step - 1)
    publish_run(plan, publisher, mode="auto", scratch_dir=tmp_path / "scratch")
    assert chosen == [True]
    monkeypatch.setattr(publisher_module, "available_bytes", lambda: estimate.train_step + 1)
    publish_run(TrainPlan(tmp_path / "again", "tiny", steps=2, backend="reference"), publisher, mode="auto")
    assert chosen == [True]
    assert _files(tmp_path / "run") == _files(tmp_path / "again")


@pytest.mark.parametrize("plan", [dict(traces=True), dict(world_size=2)])
def test_streaming_needs_one_process_and_no_traces(tmp_path, publisher, plan):
    with pytest.raises(InputError, match="one process and without --traces"):
        publish_run(TrainPlan(tmp_path / "run", "tiny", steps=2, **plan), publisher, mode="streaming")
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # 2.6 s (run/test_publisher keeps the golden digest fast) (fast tier: pytest -m 'not slow')
def test_the_streamed_golden_run_reaches_the_golden_digest(tmp_path, publisher):
    plan = TrainPlan(tmp_path / "run", "tiny", steps=GOLDEN_TINY_STEPS, ckpt_every=GOLDEN_TINY_STEPS, seed=0)
    publish_run(plan, publisher, mode="streaming", scratch_dir=tmp_path / "scratch")
    assert read_manifest(tmp_path / "run").steps[-1].output.text() == GOLDEN_TINY_DIGEST


@pytest.mark.slow
def test_a_killed_streamed_run_resumes_bit_for_bit(tmp_path, publisher):
    reference = tmp_path / "whole"
    publish_run(TrainPlan(reference, "tiny", steps=6, ckpt_every=2), publisher)
    key = tmp_path / "key.pem"
    save_identity(publisher, key)
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "p2paudit", "train", str(killed), "--steps", "6", "--ckpt-every", "2"]
    cmd += ["--mode", "streaming", "--scratch-dir", str(tmp_path / "scratch"), "--key", str(key)]
    env = dict(os.environ, P2PAUDIT_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 300
    while b'"step":1' not in _progress(killed) and time.monotonic() < deadline:  # state 2 is published
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / MANIFEST_FILE).exists(), "the run finished before it could be killed"
    result = publish_run(
        TrainPlan(killed, "tiny", steps=6, ckpt_every=2), publisher, mode="streaming", scratch_dir=tmp_path / "s2"
    )
    assert result.resumed_from >= 2 and not (killed / PROGRESS_FILE).exists()
    assert _files(killed) == _files(reference)


def _progress(run_dir: Path) -> bytes:
    try:
        return (run_dir / PROGRESS_FILE).read_bytes()
    except FileNotFoundError:
        return b""
