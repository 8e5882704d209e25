"""Two daemons, real processes on loopback, audit a published lab run of examples/lab_llama.py like any run:
they cover its steps, gossip, and each ledger holds both keys' match attestations. Beside it, a forged run
(the checkpoint of state 1 changed and its digest re-signed by the publisher's own key) is caught as a
mismatch by both, with the findings verify-range --attest signs and the notes it prints (the tensor that
differs; the first op whose outputs differ)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from p2paudit.attest.record_v2 import INIT_INDEX_STEP
from p2paudit.attest.store import AttestationStore
from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed
from p2paudit.lab import LabClaims
from p2paudit.node.localnet import NodeSpec, start_network, stop, wait_all
from p2paudit.run.lab_run import open_lab_run
from p2paudit.tensor_digest import digest_state
from tests.lab.lab_runs import publish_example

PUBLISHER = identity_from_seed(b"\x5a" * 32)
FORGED_TENSOR = "params/norm.weight"  # the final RMSNorm's weight: read late in step 1's forward


def forge_state_1(claims: LabClaims, states: list[dict[str, np.ndarray]]) -> LabClaims:
    """A publisher's lie: one bit of state 1's checkpoint flipped, its digest claimed (and signed)."""
    states[1][FORGED_TENSOR].view(np.uint32)[0] ^= 1
    return dataclasses.replace(claims, states=(digest_state(states[1]), *claims.states[1:]))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(honest, forged): examples/lab_llama.py trained two steps once, published twice."""
    where = tmp_path_factory.mktemp("lab-daemon")
    honest, forged = where / "honest", where / "forged"
    publish_example("lab_llama.py", {"honest": honest, "forged": forged}, PUBLISHER, 2, {"forged": forge_state_1})
    return honest, forged


def _attestations(ledger: Path, run_id: bytes, step: int) -> list:  # noqa: ANN401
    with AttestationStore.open_readonly(ledger) as store:
        assert store.ledger.verify().ok, f"the ledger {ledger} does not verify"
        return [signed.attestation for _, signed in store.step_attestations(run_id, step)]


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_two_daemons_audit_a_lab_run_and_catch_a_forged_one(runs, tmp_path):
    honest, forged = runs
    specs = tuple(NodeSpec(f"node-{i}", tmp_path / f"node-{i}") for i in range(2))
    # r = 2: both daemons replay every step, and each ledger must hold the other's checks (gossip, sync).
    net = start_network(specs, honest, "cpu", 2, ("--run", str(forged), "--run-lab-code"))
    try:
        home = tmp_path / "verifier"
        ledger = tmp_path / "verify-range.db"
        args = ["verify-range", "0-1", "--run", str(forged), "--attest", "--ledger", str(ledger), "--json"]
        shown = CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(home)})
        assert shown.exit_code == 1, shown.output  # what a lone verifier finds in the forged run
        exits = wait_all(net, 300)
    finally:
        stop(net)
    assert exits == {"node-0": 0, "node-1": 0}, [spec.home.joinpath("daemon.log").read_text() for spec in specs]
    statuses = [json.loads((s.home / "status.json").read_text()) for s in specs]
    keys = {bytes.fromhex(status["public_key"]) for status in statuses}
    assert len(keys) == 2
    # The lab replays ran off the event loop: step 0's replay with state 0's takes seconds (7 s measured),
    # the loop's longest stall was tens of milliseconds.
    assert all(status["health"]["longest_stall_ms"] < 2000 for status in statuses), [s["health"] for s in statuses]

    good = open_lab_run(honest)
    for spec in specs:
        init = _attestations(spec.home / "ledger.db", good.run_id, INIT_INDEX_STEP)
        assert {a.verifier for a in init} == keys and {(a.subject, a.verdict) for a in init} == {("init", "match")}
        for step in (0, 1):
            checks = [a for a in _attestations(spec.home / "ledger.db", good.run_id, step) if a.subject == "step"]
            assert {a.verifier for a in checks} == keys and {a.verdict for a in checks} == {"match"}, spec.name
            assert {a.observed_output_digest for a in checks} == {good.claims.states[step].digest}
            assert {a.backend for a in checks} == {"lab-cpu"}

    document, _ = json.JSONDecoder().raw_decode(shown.output)  # then the --attest and error lines
    audits = {a["step"]: a for a in document["audits"] if a["subject"] == "step"}
    assert "every op's outputs match" in audits[0]["note"] and FORGED_TENSOR in audits[0]["note"]
    assert "is the first whose outputs differ" in audits[1]["note"], audits[1]["note"]
    bad = open_lab_run(forged)
    for step in (0, 1):
        (alone,) = [a for a in _attestations(ledger, bad.run_id, step) if a.subject == "step"]
        assert alone.verdict == "mismatch" and alone.findings == ("state",)
        for spec in specs:
            checks = [a for a in _attestations(spec.home / "ledger.db", bad.run_id, step) if a.subject == "step"]
            assert {a.verifier for a in checks} == keys, spec.name
            for a in checks:  # the daemons sign what verify-range --attest signs
                same = ("verdict", "findings", "input_digest", "observed_output_digest", "observed_data_digest")
                assert [getattr(a, f) for f in same] == [getattr(alone, f) for f in same], (spec.name, step)
            # ...and say what verify-range says: the tensor that differs, the first op whose outputs differ.
            log = spec.home.joinpath("daemon.log").read_text()
            assert f"step {step} of forged: " in log and audits[step]["note"] in log, (step, log)
