"""verify-range with each step's micro-batches spread over W processes gives the one-process audits, bit for bit."""

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from p2paudit.audit.distributed_replay import ReplayTask, verify_range_spawned
from p2paudit.audit.replay import open_run
from p2paudit.cli import cli
from p2paudit.engine.distributed import free_loopback_port
from p2paudit.engine.progress import StepProgress
from p2paudit.engine.state import param_shapes
from p2paudit.identity import identity_from_seed
from p2paudit.run.checkpoint import load_checkpoint, save_checkpoint
from p2paudit.run.digest import digest_state
from p2paudit.run.manifest import write_manifest
from p2paudit.run.publisher import TrainPlan, publish_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

PUBLISHER = identity_from_seed(b"\x29" * 32)
P2PAUDIT = str(Path(sys.executable).with_name("p2paudit"))
FORGED_STEP = 1  # its output, state 2, is checkpointed


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """tiny, 4 steps of 4 micro-batches, checkpoints at states 0, 2, 4."""
    run_dir = tmp_path_factory.mktemp("dist-replay") / "run"
    # arithmetic=1: up to four processes replay it on the reference backend, where v1's fold is 2.5x quicker
    # (nothing here is about the version; the 180 s timeout held v2 replays on a loaded machine too tightly).
    plan = TrainPlan(run_dir, "tiny", steps=4, micro_batches=4, ckpt_every=2, backend="cpu", arithmetic=1)
    publish_run(plan, PUBLISHER)
    return run_dir


@pytest.fixture(scope="module")
def forged_dir(run_dir, tmp_path_factory) -> Path:
    """The run with step 1's claimed output one ulp away from the true one (checkpoint and manifest), re-signed."""
    target = tmp_path_factory.mktemp("dist-forged") / "run"
    shutil.copytree(run_dir, target)
    view = open_run(target)
    n = FORGED_STEP + 1
    state = load_checkpoint(target, n, view.manifest.state_digest(n), list(view.names))
    wte = state["params/wte"].copy()
    wte[3, 5] = np.nextafter(wte[3, 5], np.float32(np.inf))
    forged = dict(state, **{"params/wte": wte})
    digest = digest_state(forged)
    save_checkpoint(target, n, forged, digest)
    body = json.loads((target / "manifest.json").read_bytes())
    body["steps"][FORGED_STEP]["output"] = digest.to_dict()
    write_manifest(target, body, PUBLISHER)
    return target


def _timeless(doc: dict) -> dict:
    """The JSON document without wall-clock times (the one part that differs between runs)."""
    doc = json.loads(json.dumps(doc))
    doc["summary"].pop("seconds")
    for audit in doc["audits"]:
        audit.pop("seconds")
    return doc


def _invoke(run: Path, steps: str, *extra: str):
    return CliRunner().invoke(cli, ["verify-range", steps, "--run", str(run), "--backend", "reference", *extra])


def _verify(run: Path, steps: str, *extra: str) -> tuple[int, str]:
    """(exit code, stdout and stderr as the user sees them)."""
    result = _invoke(run, steps, *extra)
    return result.exit_code, result.output


def _json(run: Path, steps: str, world: str) -> tuple[int, dict]:
    result = _invoke(run, steps, "--json", "--world-size", world)
    return result.exit_code, json.loads(result.stdout)


@pytest.fixture(scope="module")
def one_process(run_dir) -> dict:
    code, doc = _json(run_dir, "0-3", "1")
    assert code == 0, doc
    assert [a["verdict"] for a in doc["audits"]] == ["match"] * 5  # init and steps 0-3
    return _timeless(doc)


@pytest.mark.parametrize("world", ["2", "4"])
def test_w_processes_give_the_one_process_audits(run_dir, one_process, world):
    code, doc = _json(run_dir, "0-3", world)
    assert code == 0
    assert _timeless(doc) == one_process  # digests, losses, findings, notes, summary


def test_lines_stream_from_rank_0(run_dir):
    code, out = _verify(run_dir, "2-3", "--world-size", "2")
    lines = out.splitlines()
    assert code == 0 and [line.split()[:3] for line in lines[:2]] == [["step", "2", "match"], ["step", "3", "match"]]
    assert lines[2].startswith("2 check(s) of run sha256:") and len(lines) == 3


def test_a_forged_step_is_the_same_mismatch_on_two_processes(forged_dir):
    code1, one = _json(forged_dir, "1-2", "1")
    code2, two = _json(forged_dir, "1-2", "2")
    assert code1 == code2 == 1
    first, second = two["audits"]
    assert (first["step"], first["verdict"], first["findings"]) == (1, "mismatch", ["state"])
    assert second["step"] == 2 and second["verdict"] != "error"  # re-anchored at the claimed state 2 and replayed
    assert _timeless(two) == _timeless(one)  # diagnoses included: rank 0 diagnoses on one process
    assert two["diagnoses"][0]["tensors"] == ["params/wte"]


def test_rank_0_progress_comes_back_with_its_step(run_dir):
    """Rank 0's events cross the process boundary: its share of each micro-batch tree, then the update."""
    task = ReplayTask(functools.partial(open_run, run_dir), "3", "reference", mode="in-memory")
    seen: list[StepProgress] = []
    view, report = verify_range_spawned(task, 2, progress=seen.append)
    assert report.all_match
    share, layers, params = 2, 2 * view.cfg.model.n_layer, len(param_shapes(view.cfg.model))
    per_step = share * (layers + 1) + params
    assert [e.step for e in seen] == [2] * per_step + [3] * per_step  # step 3 runs from checkpoint 2
    assert seen[share * (layers + 1) - 1] == StepProgress("micro-batch", share, share, 0, layers, step=2)
    assert seen[-1].fraction() == 1.0


@pytest.mark.parametrize(
    "world, message",
    [
        ("3", "world size 3 must be a power of two <= micro_batches 4"),
        ("8", "world size 8 must be a power of two <= micro_batches 4"),
        ("0", "world size 0 must be a power of two"),
        ("two", "--world-size 'two' is not a process count or from-env"),
    ],
)
def test_a_world_size_that_cannot_split_the_step_is_refused_in_one_line(run_dir, world, message):
    code, out = _verify(run_dir, "0-3", "--world-size", world)
    assert code == 2 and len(out.strip().splitlines()) == 1 and message in out


def test_from_env_without_torchrun_is_refused_in_one_line(run_dir, monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    code, out = _verify(run_dir, "0-3", "--world-size", "from-env")
    assert code == 2 and len(out.strip().splitlines()) == 1 and "needs torchrun's environment" in out


def _torchrun_ranks(runs: list[Path], steps: str, tmp_path: Path) -> list[tuple[int, str, str]]:
    """Start one `p2paudit verify-range --world-size from-env` per run dir as ranks of one loopback group,
    with the variables torchrun sets; (exit code, stdout, stderr) of each."""
    port = free_loopback_port()
    procs = []
    for rank, run in enumerate(runs):
        env = dict(
            os.environ,
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(len(runs)),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            OMP_NUM_THREADS="1",
            P2PAUDIT_HOME=str(tmp_path / f"home{rank}"),
        )
        argv = [P2PAUDIT, "verify-range", steps, "--run", str(run), "--backend", "reference"]
        argv += ["--json", "--world-size", "from-env"]
        procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def test_torchrun_environment_on_loopback_gives_the_one_process_audits(run_dir, one_process, tmp_path):
    (code0, out0, err0), (code1, out1, err1) = _torchrun_ranks([run_dir, run_dir], "0-3", tmp_path)
    assert code0 == 0, err0
    assert _timeless(json.loads(out0)) == one_process
    assert (code1, out1) == (0, ""), err1  # the other rank steps and says nothing


def test_torchrun_ranks_that_would_replay_different_runs_stop_before_any_step(run_dir, forged_dir, tmp_path):
    (code0, out0, err0), (code1, out1, err1) = _torchrun_ranks([run_dir, forged_dir], "0-3", tmp_path)
    assert (code0, code1) == (2, 2) and out0 == out1 == ""
    assert "rank(s) [1] of 2 would replay another run, step range or backend than rank 0" in err0
    assert "rank(s) [0] of 2 would replay another run" in err1
