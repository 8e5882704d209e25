"""`p2paudit train`, `verify-range` and `demo` through click's runner: output and exit codes 0, 1, 2."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from kernels import ARITHMETIC_VERSION
from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed, save_identity
from p2paudit.run.golden import GOLDEN_TINY_DIGEST

PUBLISHER = identity_from_seed(b"\x22" * 32)


def _invoke(args, home: Path):
    return CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(home)}, catch_exceptions=False)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory) -> Path:
    """A run published through the CLI with an explicit key: tiny, 3 steps, checkpoints at 0, 2, 3."""
    base = tmp_path_factory.mktemp("cli")
    save_identity(PUBLISHER, base / "key.pem")
    result = _invoke(
        [
            "train",
            str(base / "run"),
            "--steps",
            "3",
            "--ckpt-every",
            "2",
            "--backend",
            "cpu",
            "--key",
            str(base / "key.pem"),
        ],
        base / "home",
    )
    assert result.exit_code == 0, result.output
    assert "run sha256:" in result.output and "(trained)" in result.output
    assert not (base / "home").exists()  # an explicit key: the node key is not created
    return base / "run"


@pytest.fixture
def run_copy(cli_run, tmp_path) -> Path:
    shutil.copytree(cli_run, tmp_path / "run")
    return tmp_path / "run"


def test_train_again_reuses_and_other_flags_are_refused(cli_run, tmp_path):
    key = tmp_path / "key.pem"
    save_identity(PUBLISHER, key)
    again = _invoke(
        ["train", str(cli_run), "--steps", "3", "--ckpt-every", "2", "--backend", "cpu", "--key", str(key)],
        tmp_path,
    )
    assert again.exit_code == 0 and "already complete" in again.output
    other = _invoke(["train", str(cli_run), "--steps", "4", "--ckpt-every", "2", "--key", str(key)], tmp_path)
    assert other.exit_code == 2 and "another config" in other.output


def test_train_creates_the_node_key_when_none_is_given(tmp_path):
    result = _invoke(["train", str(tmp_path / "run"), "--steps", "1", "--backend", "reference"], tmp_path / "home")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "home" / "node.key").is_file()
    # The node is set up as `p2paudit init` would: `p2paudit id` now shows the publisher's key.
    shown = _invoke(["id", "--json"], tmp_path / "home")
    assert shown.exit_code == 0, shown.output
    manifest_key = json.loads((tmp_path / "run" / "manifest.sig.json").read_bytes())["public_key"]
    assert manifest_key in shown.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["--steps", "0"], "--steps is 0"),
        (["--ckpt-every", "-1"], "--ckpt-every is -1"),
        (["--key", "/nonexistent/key.pem"], "/nonexistent/key.pem"),
        (["--backend", "gpu"], "'gpu'"),
        (["--micro-batches", "3"], "micro_batches is 3"),
    ],
)
def test_train_bad_usage_exits_2_with_one_line(tmp_path, args, message):
    result = _invoke(["train", str(tmp_path / "run"), *args], tmp_path / "home")
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "run").exists()


def test_verify_range_prints_one_line_per_step_and_a_summary(cli_run, tmp_path):
    result = _invoke(["verify-range", "0-2", "--run", str(cli_run), "--backend", "reference"], tmp_path)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    # A range with step 0 checks the initial state first; the digest on step n's line is state n+1.
    assert lines[0].split()[:2] == ["init", "match"]
    assert [line.split()[:3] for line in lines[1:4]] == [["step", str(n), "match"] for n in range(3)]
    assert "4 check(s) of run sha256:" in lines[-1] and "4 match, 0 mismatch, 0 error" in lines[-1]
    assert f"signed by publisher key {PUBLISHER.public_key.hex()}" in lines[-1]


def test_verify_range_json(cli_run, tmp_path):
    result = _invoke(["verify-range", "2", "--run", str(cli_run), "--backend", "reference", "--json"], tmp_path)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # stderr holds the progress events
    assert report["summary"]["match"] == 1 and report["audits"][0]["step"] == 2
    assert report["summary"]["publisher"] == PUBLISHER.public_key.hex()
    assert set(report["audits"][0]) >= {
        "run_id",
        "input_digest",
        "subject",
        "claimed_data",
        "observed_data",
        "claimed_loss",
        "observed_loss",
        "findings",
        "claimed_digest",
        "observed_digest",
        "verdict",
        "backend",
        "seconds",
    }


@pytest.mark.parametrize(
    "args, message",
    [
        (["2-1"], "runs backwards"),
        (["0-3"], "step 3 is outside the run"),
        (["x"], "is not 'init', 'A-B'"),
    ],
)
def test_verify_range_bad_ranges_exit_2(cli_run, tmp_path, args, message):
    result = _invoke(["verify-range", *args, "--run", str(cli_run), "--backend", "reference"], tmp_path)
    assert result.exit_code == 2 and message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_verify_range_pins_the_publisher_key(cli_run, tmp_path):
    good = _invoke(
        [
            "verify-range",
            "2",
            "--run",
            str(cli_run),
            "--backend",
            "reference",
            "--publisher",
            PUBLISHER.public_key.hex(),
        ],
        tmp_path,
    )
    assert good.exit_code == 0, good.output
    other = identity_from_seed(b"\x23" * 32).public_key.hex()
    bad = _invoke(["verify-range", "2", "--run", str(cli_run), "--publisher", other], tmp_path)
    assert bad.exit_code == 2 and f"not by the expected publisher {other}" in bad.output
    malformed = _invoke(["verify-range", "2", "--run", str(cli_run), "--publisher", "abc"], tmp_path)
    assert malformed.exit_code == 2 and "public key" in malformed.output


def test_verify_range_missing_run_exits_2(tmp_path):
    assert _invoke(["verify-range", "0"], tmp_path).exit_code == 2  # --run is required
    result = _invoke(["verify-range", "0", "--run", str(tmp_path / "nowhere")], tmp_path)
    assert result.exit_code == 2 and "does not exist" in result.output


@pytest.mark.parametrize(
    "relative",
    ["manifest.json", "manifest.sig.json", "shards/shard-00002.bin", "checkpoints/step-00000002.safetensors"],
)
def test_a_flipped_bit_exits_2_naming_the_file(run_copy, tmp_path, relative):
    target = run_copy / relative
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x10
    target.write_bytes(bytes(data))
    before = sorted(p.name for p in run_copy.rglob("*"))
    result = _invoke(["verify-range", "0-2", "--run", str(run_copy), "--backend", "reference"], tmp_path)
    assert result.exit_code == 2 and str(target) in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert sorted(p.name for p in run_copy.rglob("*")) == before  # nothing written


def test_a_forged_claim_exits_1_with_a_diagnosis(run_copy, tmp_path):
    from p2paudit.audit.replay import open_run
    from p2paudit.run.checkpoint import load_checkpoint, save_checkpoint
    from p2paudit.run.digest import digest_state
    from p2paudit.run.manifest import write_manifest

    view = open_run(run_copy)
    state = load_checkpoint(run_copy, 2, view.manifest.state_digest(2), list(view.names))
    v = state["opt/v/ln_f"].copy()
    v[:4] = np.nextafter(v[:4], np.float32(np.inf))
    forged = dict(state, **{"opt/v/ln_f": v})
    save_checkpoint(run_copy, 2, forged, digest_state(forged))
    body = json.loads((run_copy / "manifest.json").read_bytes())
    body["steps"][1]["output"] = digest_state(forged).to_dict()
    write_manifest(run_copy, body, PUBLISHER)
    result = _invoke(
        ["verify-range", "1", "--run", str(run_copy), "--backend", "reference", "--against", "reference"], tmp_path
    )
    assert result.exit_code == 1, result.output
    assert "mismatch" in result.output
    assert "opt/v/ln_f: 4 of 64 elements differ, max 1 ulp" in result.output
    assert "fault is in the claim, not the verifier" in result.output


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_demo_runs_the_network_catches_the_liar_and_checks_the_golden_digest(tmp_path):
    user = tmp_path / "user"  # the user's real ~ and $P2PAUDIT_HOME: the demo writes neither
    user.mkdir()
    env = {"P2PAUDIT_HOME": str(tmp_path / "home"), "HOME": str(user), "MPLCONFIGDIR": None}
    result = CliRunner().invoke(cli, ["demo", "--dir", str(tmp_path / "demo")], env=env, catch_exceptions=False)
    assert not (tmp_path / "home").exists() and list(user.iterdir()) == []
    assert (tmp_path / "demo" / "home" / "node.key").is_file()  # the publisher's key is the demo's own
    assert result.exit_code == 0, result.output
    assert f"{GOLDEN_TINY_DIGEST} == the committed constant" in result.output
    for n in range(5):
        assert f"node-{n}: exit 0" in result.output
        assert f"node-{n}'s ledger: " in result.output and "(0 of the union missing), verifies" in result.output
    (dispute,) = [line for line in result.output.splitlines() if line.startswith("dispute at step")]
    assert dispute.startswith("dispute at step 5:") and dispute.endswith("lied: node-4")
    assert "9 match, 0 mismatch, 0 error" in result.output  # this machine's own replay: init and 8 steps
    assert (tmp_path / "demo" / "coverage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Its peers witnessed node-0's ledger: the checkpoint carries their C2SP cosignatures.
    shown = _invoke(["ledger", "checkpoint"], tmp_path / "demo" / "nodes" / "node-0")
    assert shown.exit_code == 0, shown.output
    assert sum(line.startswith("— p2paudit.dev/witness/") for line in shown.output.splitlines()) >= 2
    # The run itself forged: step 5 claims step 4's state. Reused, audited, and the claim fails (exit 1).
    from p2paudit.identity import load_identity
    from p2paudit.run.manifest import write_manifest

    run_dir = tmp_path / "demo" / "run"
    body = json.loads((run_dir / "manifest.json").read_bytes())
    body["steps"][5]["output"] = body["steps"][4]["output"]
    write_manifest(run_dir, body, load_identity(tmp_path / "demo" / "home" / "node.key"))
    # three nodes this time (the fewest --nodes takes): the network's part is the same, with less to start
    forged = CliRunner().invoke(
        cli, ["demo", "--dir", str(tmp_path / "demo"), "--nodes", "3"], env=env, catch_exceptions=False
    )
    assert not (tmp_path / "home").exists() and list(user.iterdir()) == []
    assert forged.exit_code == 1, forged.output
    assert "reusing the finished run" in forged.output
    assert "6 match, 1 mismatch, 2 error" in forged.output
    assert "does not match its claim at 5, 6, 7" in forged.output


def test_demo_into_a_file_exits_2(tmp_path):
    (tmp_path / "file").write_text("x")
    result = _invoke(["demo", "--dir", str(tmp_path / "file")], tmp_path / "home")
    assert result.exit_code == 2 and "is a file" in result.output


@pytest.mark.slow  # 4 s (fast tier: pytest -m 'not slow')
def test_an_unavailable_backend_exits_2(cli_run, tmp_path):
    # A fresh process with no GPU visible and no Triton interpreter: triton cannot run there.
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "P2PAUDIT_TRITON_COMPILE_ONLY")}
    env.update(CUDA_VISIBLE_DEVICES="", P2PAUDIT_HOME=str(tmp_path / "home"))

    def run(*args):
        return subprocess.run(
            [sys.executable, "-m", "p2paudit", *args], capture_output=True, text=True, env=env, timeout=300
        )

    result = run("verify-range", "0", "--run", str(cli_run), "--backend", "triton")
    assert result.returncode == 2, result.stderr
    assert "backend triton is not available here" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run("train", str(tmp_path / "new"), "--backend", "triton")
    assert result.returncode == 2 and not (tmp_path / "new").exists(), result.stderr


def test_a_publisher_that_relabels_a_run_as_the_other_arithmetic_version_is_caught(run_copy, tmp_path):
    """The manifest's arithmetic_version is part of the claim: the states were made under one version, so a
    manifest re-signed to name the other makes every replay (in the version named) a mismatch."""
    body = json.loads((run_copy / "manifest.json").read_bytes())
    assert body["arithmetic_version"] == ARITHMETIC_VERSION  # train's default
    body["arithmetic_version"] = 3 - ARITHMETIC_VERSION
    from p2paudit.run.manifest import write_manifest

    write_manifest(run_copy, body, PUBLISHER)
    result = _invoke(["verify-range", "0-2", "--run", str(run_copy), "--backend", "reference"], tmp_path)
    assert result.exit_code == 1, result.output
    assert result.output.count("mismatch") >= 3


def test_train_arithmetic_publishes_a_run_of_the_other_version_that_verifies(tmp_path):
    other = 3 - ARITHMETIC_VERSION
    key = tmp_path / "key.pem"
    save_identity(PUBLISHER, key)
    args = ["train", str(tmp_path / "run"), "--steps", "2", "--backend", "reference", "--key", str(key)]
    trained = _invoke([*args, "--arithmetic", str(other)], tmp_path / "home")
    assert trained.exit_code == 0, trained.output
    assert json.loads((tmp_path / "run" / "manifest.json").read_bytes())["arithmetic_version"] == other
    checked = _invoke(["verify-range", "0-1", "--run", str(tmp_path / "run"), "--backend", "cpu"], tmp_path)
    assert checked.exit_code == 0, checked.output
    resumed = _invoke([*args, "--arithmetic", str(ARITHMETIC_VERSION)], tmp_path / "home")  # exists in `other`
    assert resumed.exit_code == 2, resumed.output
    bad = _invoke(["train", str(tmp_path / "other"), "--arithmetic", "3"], tmp_path / "home")
    assert bad.exit_code == 2 and "'3' is not one of '1', '2'" in bad.output
