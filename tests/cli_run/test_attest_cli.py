"""`verify-range --attest`: a replay becomes signed attestations in the node's ledger."""

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed
from p2paudit.run.publisher import TrainPlan, publish_run

PUBLISHER = identity_from_seed(b"\x33" * 32)


def _invoke(args, home: Path):
    return CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(home)}, catch_exceptions=False)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """tiny, 3 steps, checkpoints of states 0, 2, 3."""
    run_dir = tmp_path_factory.mktemp("attest") / "run"
    publish_run(TrainPlan(run_dir, "tiny", steps=3, ckpt_every=2, backend="cpu"), PUBLISHER)
    return run_dir


def test_attest_records_each_step_once_and_coverage_counts_them(small_run, tmp_path):
    home = tmp_path / "home"
    first = _invoke(["verify-range", "0-2", "--run", str(small_run), "--backend", "reference", "--attest"], home)
    assert first.exit_code == 0, first.output
    # State 0 rebuilt from the recipe, then steps 0-2: four signed checks.
    assert "attested 4 check(s)" in first.output and "4 new, tree size 4" in first.output
    again = _invoke(["verify-range", "1", "--run", str(small_run), "--backend", "reference", "--attest"], home)
    assert again.exit_code == 0, again.output
    assert "0 new, tree size 4" in again.output  # the same result is not signed twice

    cov = _invoke(["ledger", "coverage", "--json"], home)
    assert cov.exit_code == 0, cov.output
    every = json.loads(cov.output)["all_keys"]
    assert json.loads(cov.output)["steps"] == 3
    assert [s["match"] for s in every["per_step"]] == [1, 1, 1]
    verify = _invoke(["ledger", "verify"], home)
    assert verify.exit_code == 0, verify.output
    assert "4 entries" in verify.output


def test_attest_records_a_mismatch_verdict(small_run, tmp_path):
    from p2paudit.run.manifest import write_manifest

    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    body = json.loads((run_dir / "manifest.json").read_bytes())
    body["steps"][0]["output"] = body["steps"][1]["output"]  # step 0 claims step 1's output (no checkpoint of state 1)
    write_manifest(run_dir, body, PUBLISHER)
    home = tmp_path / "home"
    result = _invoke(["verify-range", "0", "--run", str(run_dir), "--backend", "reference", "--attest"], home)
    assert result.exit_code == 1, result.output
    assert "attested 2 check(s)" in result.output  # init and step 0
    cov = json.loads(_invoke(["ledger", "coverage", "--json"], home).output)["all_keys"]
    assert [(s["step"], s["mismatch"]) for s in cov["per_step"]] == [(0, 1)]


def test_a_data_only_dispute_reaches_the_ledger_with_the_steps_after_it(small_run, tmp_path):
    """Issue 7 A3: only the claimed data digest of step 1 changed; every outcome is still signed."""
    from p2paudit.attest.store import AttestationStore
    from p2paudit.run.manifest import write_manifest

    run_dir = tmp_path / "run"
    shutil.copytree(small_run, run_dir)
    body = json.loads((run_dir / "manifest.json").read_bytes())
    body["steps"][1]["data"] = "sha256:" + "00" * 32
    write_manifest(run_dir, body, PUBLISHER)
    home = tmp_path / "home"
    result = _invoke(["verify-range", "0-2", "--run", str(run_dir), "--backend", "reference", "--attest"], home)
    assert result.exit_code == 1, result.output
    assert "attested 4 check(s)" in result.output and "4 new" in result.output
    with AttestationStore.open(home / "ledger.db") as store:
        ((_, signed),) = store.step_attestations(bytes.fromhex(_run_id(run_dir)), 1)
    record = signed.attestation
    assert (record.verdict, record.findings) == ("mismatch", ("data",))
    assert record.observed_output_digest == record.claimed_output_digest
    assert record.observed_data_digest != record.claimed_data_digest


def _run_id(run_dir: Path) -> str:
    return json.loads((run_dir / "manifest.sig.json").read_bytes())["run_id"].removeprefix("sha256:")
