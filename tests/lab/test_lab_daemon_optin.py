"""A daemon audits a lab run only on the operator's opt-in (--run-lab-code), only from a --publisher key when
some are given (both refused before the publisher's script runs), never under another torch build; what it
opens replays the run's steps as verify-range does, the daemon's policy applied."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from p2paudit.audit.lab_sandbox import SANDBOX_ENV
from p2paudit.cli import cli
from p2paudit.cli.daemon_sources import open_sources
from p2paudit.errors import EXIT_USAGE, InputError
from p2paudit.identity import ensure_node_identity, generate_identity
from p2paudit.node.assign.auditor import AuditPolicy
from p2paudit.node.daemon.lab_source import LabReplayFailed, LabRunRefused, LabSource
from p2paudit.run.lab_run import open_lab_run
from p2paudit.run.manifest import manifest_from_bytes
from tests.lab.lab_runs import publish_tiny

MARKER_ENV = "P2PAUDIT_TEST_LAB_SCRIPT_RAN"
# Appended to the tiny script: running it leaves a file behind, so a test sees whether it ran.
MARKER_SOURCE = """
import os as _os
import pathlib as _pathlib

if _os.environ.get("P2PAUDIT_TEST_LAB_SCRIPT_RAN"):
    _pathlib.Path(_os.environ["P2PAUDIT_TEST_LAB_SCRIPT_RAN"]).write_text("ran")

_train_step = train_step


def train_step(model, opt, tokens):
    if _os.environ.get("P2PAUDIT_TEST_LAB_SCRIPT_RAISES"):
        raise RuntimeError("the lab's own bug")
    return _train_step(model, opt, tokens)
"""


@pytest.fixture(scope="module")
def marked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, bytes]:
    """(home, run, publisher key): a one-step tiny lab run whose script marks that it ran."""
    where = tmp_path_factory.mktemp("marked")
    identity, _ = ensure_node_identity(where / "home")
    return where / "home", publish_tiny(where, identity, 1, extra_source=MARKER_SOURCE), identity.public_key


def daemon(home: Path, *args: str):  # noqa: ANN201
    return CliRunner().invoke(cli, ["daemon", *args, "--duration", "0"], env={"P2PAUDIT_HOME": str(home)})


def test_a_lab_run_is_refused_without_the_opt_in_before_its_script_runs(marked, tmp_path, monkeypatch):
    home, run, _ = marked
    marker = tmp_path / "ran"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    result = daemon(home, "--run", str(run))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == EXIT_USAGE, result.output
    assert len(lines) == 1 and "is a lab run" in lines[0] and "--run-lab-code" in lines[0], result.output
    assert not marker.exists()


def test_a_lab_run_of_another_publisher_is_refused_before_its_script_runs(marked, tmp_path, monkeypatch):
    home, run, _ = marked
    marker = tmp_path / "ran"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    other = generate_identity().public_key.hex()
    result = daemon(home, "--run", str(run), "--run-lab-code", "--publisher", other)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == EXIT_USAGE, result.output
    assert len(lines) == 1 and "not by a --publisher key (its script not run)" in lines[0], result.output
    assert not marker.exists()


def test_with_the_opt_in_the_run_opens_and_replays_as_verify_range_does(marked, tmp_path, monkeypatch):
    home, run, publisher = marked
    marker = tmp_path / "ran"
    monkeypatch.setenv(MARKER_ENV, str(marker))
    monkeypatch.setenv(SANDBOX_ENV, "none")  # the control below: the marker lies outside what the sandbox shows
    (source,), urls = open_sources((str(run),), frozenset({publisher}), run_lab_code=True)
    assert not marker.exists()  # opening a run never runs its script (the replay's child process does)
    assert isinstance(source, LabSource) and urls == ()
    view = open_lab_run(run)
    assert (source.manifest.run_id, source.manifest.num_steps, source.manifest.public_key) == (
        view.run_id,
        1,
        publisher,
    )
    init, step = source.replay(0, "reference", AuditPolicy())  # the daemon's backend does not apply
    assert marker.read_text() == "ran"  # the control: the marker does show a run of the script
    assert (init.subject, init.verdict, step.subject, step.verdict) == ("init", "match", "step", "match")
    assert step.backend == "lab-cpu" and step.observed_digest == view.claims.states[0].digest
    # The daemon's policy applies to lab steps too: the demo's dishonest volunteer lies about step 0.
    _, lie = source.replay(0, "cpu", AuditPolicy(lie_about_step=0))
    assert lie.verdict == "mismatch" and lie.observed_digest != view.claims.states[0].digest


def test_a_replay_the_script_breaks_is_a_step_to_back_off_from(marked, monkeypatch):
    """A script that raises in a replay (it trained fine) gives the InputError the daemon's audit loop backs
    off from (that step later, others first), not an exception that restarts the loop on the same step."""
    _, run, publisher = marked
    (source,), _ = open_sources((str(run),), frozenset({publisher}), run_lab_code=True)
    monkeypatch.setenv("P2PAUDIT_TEST_LAB_SCRIPT_RAISES", "1")
    with pytest.raises(LabReplayFailed, match=r"the lab replay raised RuntimeError: the lab's own bug \(the pub"):
        source.replay(0, "cpu", AuditPolicy())
    assert isinstance(LabReplayFailed("x"), InputError)
    monkeypatch.delenv("P2PAUDIT_TEST_LAB_SCRIPT_RAISES")
    assert [a.verdict for a in source.replay(0, "cpu", AuditPolicy())] == ["match", "match"]  # the control


def test_a_lab_run_of_another_torch_build_is_refused_in_one_line(tmp_path):
    identity, _ = ensure_node_identity(tmp_path / "home")
    build = "torch 2.11.0+cpu (git 1a2b)"
    run = publish_tiny(tmp_path, identity, 1, lambda claims, states: dataclasses.replace(claims, torch_build=build))
    with pytest.raises(LabRunRefused, match=r"trained under torch 2\.11\.0\+cpu \(git 1a2b\); this replay runs"):
        open_sources((str(run),), None, run_lab_code=True)
    result = daemon(tmp_path / "home", "--run", str(run), "--run-lab-code")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == EXIT_USAGE and len(lines) == 1 and build in lines[0], result.output


def test_opening_an_engine_run_does_not_import_torch(tmp_path):
    """Only a lab run's replay needs torch: a daemon of engine runs tells them apart without it."""
    from p2paudit.run.publisher import TrainPlan, publish_run

    run = tmp_path / "run"
    publish_run(TrainPlan(run, "tiny", steps=1, ckpt_every=1, backend="reference", arithmetic=1), generate_identity())
    probe = (
        "import sys; from p2paudit.cli.daemon_sources import open_sources; "
        f"(s,), _ = open_sources(({str(run)!r},), None); "
        "print(type(s).__name__, 'torch' in sys.modules)"
    )
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert shown.stdout.split() == ["LocalSource", "False"], shown.stderr


def test_a_lab_run_met_where_an_engine_run_is_fetched_is_named_as_such(marked):
    """A lab run's manifest checked as an engine run's (where only an engine run is taken: a followed lab's
    announcement) is named for what it is, not as a bad signature."""
    _, run, _ = marked
    body, sig = (run / "manifest.json").read_bytes(), (run / "manifest.sig.json").read_bytes()
    with pytest.raises(InputError, match=r"is a lab run's \(train-script's\), not an engine run's: .* --run-lab-code"):
        manifest_from_bytes(body, sig, "http://lab/run/manifest.json", "http://lab/run/manifest.sig.json")
    tampered = body.replace(b'"backend":"cpu"', b'"backend":"gpu"')
    assert tampered != body  # a body no key signed is still a bad signature, under either domain
    with pytest.raises(InputError, match="does not verify for public key"):
        manifest_from_bytes(tampered, sig.replace(*_run_ids(body, tampered)), "m", "s")


def _run_ids(body: bytes, tampered: bytes) -> tuple[bytes, bytes]:
    """(the run id text of `body`, of `tampered`) as the signature file writes it: swapped, the run id checks."""
    return (hashlib.sha256(body).hexdigest().encode(), hashlib.sha256(tampered).hexdigest().encode())
