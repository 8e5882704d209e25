"""The publisher: resumable bit for bit after a kill, the same run on 1, 2 or 4 processes, the golden digest."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernels import ARITHMETIC_VERSION
from p2paudit.audit.replay import open_run, parse_step_range, verify_range
from p2paudit.errors import InputError
from p2paudit.identity import save_identity
from p2paudit.run.golden import GOLDEN_TINY_DIGEST, GOLDEN_TINY_DIGESTS, GOLDEN_TINY_STEPS
from p2paudit.run.manifest import MANIFEST_FILE, read_manifest
from p2paudit.run.publisher import PROGRESS_FILE, TrainPlan, publish_run


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_a_finished_run_is_reused_and_a_different_plan_refused(published_run, publisher):
    again = publish_run(TrainPlan(published_run, "tiny", steps=4, ckpt_every=2, backend="reference"), publisher)
    assert again.already_complete and again.run_id == read_manifest(published_run).run_id
    with pytest.raises(InputError, match="another config, --steps or --ckpt-every"):
        publish_run(TrainPlan(published_run, "tiny", steps=5, ckpt_every=2, backend="reference"), publisher)


def test_a_foreign_directory_is_not_written(tmp_path, publisher):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="notes.txt"):
        publish_run(TrainPlan(tmp_path, steps=1, backend="reference"), publisher)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    "plan, message",
    [
        (dict(steps=0), "--steps is 0"),
        (dict(ckpt_every=0), "--ckpt-every is 0"),
        (dict(world_size=0), "--world-size is 0"),
        (dict(world_size=2, traces=True), "--traces needs"),
        (dict(world_size=8), "world size 8 must be a power of two <= micro_batches 4"),
    ],
)
def test_bad_plans_are_refused_before_anything_is_written(tmp_path, publisher, plan, message):
    with pytest.raises(InputError, match=message):
        publish_run(TrainPlan(tmp_path / "run", backend="reference", **plan), publisher)
    assert not (tmp_path / "run").exists()


def test_a_damaged_progress_file_is_named(tmp_path, publisher):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / PROGRESS_FILE).write_text('{"config": ')
    with pytest.raises(InputError, match=f"{run_dir / PROGRESS_FILE} is damaged"):
        publish_run(TrainPlan(run_dir, steps=1, backend="reference"), publisher)


def test_golden_digest_of_the_builtin_tiny_run(tmp_path, publisher):
    # The constant is also printed by `p2paudit demo`; it changes only if the engine,
    # the kernels or the corpus change, and then every earlier run stops replaying.
    run_dir = tmp_path / "golden"
    publish_run(TrainPlan(run_dir, "tiny", steps=GOLDEN_TINY_STEPS, ckpt_every=4, backend="reference"), publisher)
    assert read_manifest(run_dir).state_digest(GOLDEN_TINY_STEPS).text() == GOLDEN_TINY_DIGEST
    assert read_manifest(run_dir).arithmetic == ARITHMETIC_VERSION  # a new run's default


def test_the_other_arithmetic_version_trains_and_replays_to_its_golden_digest(tmp_path, publisher):
    other = 3 - ARITHMETIC_VERSION
    run_dir = tmp_path / f"v{other}"
    plan = TrainPlan(run_dir, "tiny", steps=GOLDEN_TINY_STEPS, ckpt_every=4, backend="cpu", arithmetic=other)
    publish_run(plan, publisher)
    manifest = read_manifest(run_dir)
    assert manifest.arithmetic == other and manifest.head["arithmetic_version"] == other
    assert manifest.state_digest(GOLDEN_TINY_STEPS).text() == GOLDEN_TINY_DIGESTS[other]
    report = verify_range(open_run(run_dir), parse_step_range("6-7", GOLDEN_TINY_STEPS), "reference")
    assert [a.verdict for a in report.audits] == ["match", "match"]
    assert {a.arithmetic_version for a in report.audits} == {other}


@pytest.mark.slow
def test_resume_after_sigkill_is_bit_identical(tmp_path, publisher):
    # Version 1: six steps three times on the reference backend, where v1's fold is 2.5x quicker (resuming is
    # the same in either version).
    reference = tmp_path / "whole"
    publish_run(TrainPlan(reference, "tiny", steps=6, ckpt_every=2, backend="reference", arithmetic=1), publisher)
    key = tmp_path / "key.pem"
    save_identity(publisher, key)
    killed = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "p2paudit",
        "train",
        str(killed),
        "--steps",
        "6",
        "--ckpt-every",
        "2",
        "--backend",
        "reference",
        "--arithmetic",
        "1",
        "--key",
        str(key),
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ, P2PAUDIT_HOME=str(tmp_path / "home")),
    )
    deadline = time.monotonic() + 300
    # Kill once state 2 is checkpointed: the run is then mid-way, with a step in flight.
    while b'"step":1' not in _progress(killed) and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / MANIFEST_FILE).exists(), "the run finished before it could be killed"
    result = publish_run(TrainPlan(killed, "tiny", steps=6, ckpt_every=2, backend="reference", arithmetic=1), publisher)
    assert result.resumed_from >= 2 and not result.already_complete
    assert not (killed / PROGRESS_FILE).exists()
    assert _files(killed) == _files(reference)


def _progress(run_dir: Path) -> bytes:
    try:
        return (run_dir / PROGRESS_FILE).read_bytes()
    except FileNotFoundError:
        return b""


@pytest.mark.slow
def test_world_sizes_1_2_4_publish_the_same_run(tmp_path, publisher):
    runs = {}
    for world in (1, 2, 4):  # version 1: the reference backend's quicker fold, in up to four processes
        run_dir = tmp_path / f"w{world}"
        plan = TrainPlan(run_dir, "tiny", steps=2, ckpt_every=1, world_size=world, backend="reference", arithmetic=1)
        publish_run(plan, publisher)
        runs[world] = _files(run_dir)
    assert runs[1] == runs[2] == runs[4]
    steps = read_manifest(tmp_path / "w4").steps
    assert len({s.output.digest for s in steps}) == 2  # two different states, each equal across world sizes


def test_a_directory_being_written_is_refused(tmp_path, publisher):
    import fcntl

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a publisher in another process holds it
        with pytest.raises(InputError, match="being written by another process"):
            publish_run(TrainPlan(run_dir, steps=1, backend="reference"), publisher)
    finally:
        os.close(fd)
    assert list(run_dir.iterdir()) == []
