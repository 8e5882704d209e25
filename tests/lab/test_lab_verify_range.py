"""`p2paudit verify-range A-B --run DIR` on a lab run: the lab replay's findings as audits, printed as verify-range
prints any run's, exit codes as verify-script's, and with --attest signed into the ledger."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from p2paudit.attest.store import AttestationStore
from p2paudit.cli import cli
from p2paudit.errors import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE
from p2paudit.identity import ensure_node_identity, generate_identity
from p2paudit.run.lab_run import open_lab_run
from p2paudit.tensor_digest import digest_state
from tests.lab.lab_runs import publish_tiny


def invoke(home: Path, *args: str):  # noqa: ANN201
    return CliRunner().invoke(cli, list(args), env={"P2PAUDIT_HOME": str(home)})


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(home, run): a two-step tiny lab run published with the home's node key."""
    where = tmp_path_factory.mktemp("honest")
    identity, _ = ensure_node_identity(where / "home")
    return where / "home", publish_tiny(where, identity)


def test_verify_range_replays_a_lab_run_and_prints_as_for_any_run(honest):
    home, run = honest
    result = invoke(home, "verify-range", "0-1", "--run", str(run))
    assert result.exit_code == EXIT_OK, result.output
    lines = result.output.splitlines()
    view = open_lab_run(run)
    assert lines[0].split()[:2] == ["init", "match"]
    assert lines[1].split()[:3] == ["step", "0", "match"] and view.claims.states[0].text() in lines[1]
    assert lines[2].split()[:3] == ["step", "1", "match"] and view.claims.states[1].text() in lines[2]
    assert lines[3].startswith(f"3 check(s) of run sha256:{view.run_id.hex()}: 3 match, 0 mismatch, 0 error")
    assert f"signed by publisher key {view.public_key.hex()}" in lines[3] and ", lab, torch " in lines[3]
    one = invoke(home, "verify-range", "1", "--run", str(run), "--json")
    assert one.exit_code == EXIT_OK, one.output
    document = json.loads(one.output)
    assert document["summary"]["match"] == 1 and document["summary"]["replay"] == "lab"
    (audit,) = document["audits"]
    assert audit["step"] == 1 and audit["backend"] == "lab-cpu"
    assert audit["input_digest"] == view.claims.states[0].text()
    assert audit["claimed_data"] == audit["observed_data"] == "sha256:" + view.claims.traces[1].hex()


def test_attest_signs_each_lab_check_into_the_ledger(honest, tmp_path):
    home, run = honest
    ledger = tmp_path / "ledger.db"
    result = invoke(home, "verify-range", "0-1", "--run", str(run), "--attest", "--ledger", str(ledger))
    assert result.exit_code == EXIT_OK, result.output
    assert "attested 3 check(s) in ledger" in result.output and "3 new" in result.output
    view = open_lab_run(run)
    with AttestationStore.open_readonly(ledger) as store:
        (info,) = store.runs()
        assert info.steps == 2
        for step in (0, 1):
            records = [s.attestation for _, s in store.step_attestations(view.run_id, step)]
            (record,) = [r for r in records if r.subject == "step"]
            before = view.claims.initial if step == 0 else view.claims.states[step - 1]
            assert record.verdict == "match" and record.input_digest == before.digest
            assert record.claimed_output_digest == record.observed_output_digest == view.claims.states[step].digest
            assert record.claimed_data_digest == record.observed_data_digest == view.claims.traces[step]
            assert record.claimed_loss_bits == record.observed_loss_bits == 0
            assert record.engine_version.startswith("p2paudit-lab op-table 1 sandboxed torch ")


def test_a_signed_lie_about_a_state_is_a_mismatch_naming_the_tensor(tmp_path):
    identity, _ = ensure_node_identity(tmp_path / "home")

    def lie(claims, states):  # noqa: ANN001, ANN202
        forged = {k: v.copy() for k, v in states[2].items()}
        forged["params/norm.weight"].view(np.uint32)[0] ^= 1
        return dataclasses.replace(claims, states=(claims.states[0], digest_state(forged)))

    run = publish_tiny(tmp_path, identity, change=lie)
    ledger = tmp_path / "ledger.db"
    result = invoke(tmp_path / "home", "verify-range", "1", "--run", str(run), "--attest", "--ledger", str(ledger))
    assert result.exit_code == EXIT_MISMATCH, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("step")]
    assert line.split()[:3] == ["step", "1", "mismatch"]
    assert "state after step 1 differs in 1 tensors: params/norm.weight; every op's outputs match" in line
    with AttestationStore.open_readonly(ledger) as store:
        ((_, signed),) = store.step_attestations(open_lab_run(run).run_id, 1)
        assert signed.attestation.verdict == "mismatch" and signed.attestation.findings == ("state",)


def test_another_op_graph_is_the_data_finding_and_state_0_is_rebuilt(tmp_path):
    identity, _ = ensure_node_identity(tmp_path / "home")

    def other_graph(claims, states):  # noqa: ANN001, ANN202
        ops = list(claims.trace_ops[0])
        record = json.loads(ops[1])
        record[0] = "aten.forged.default"  # the second op claimed as another: the first departing op
        ops[1] = json.dumps(record, separators=(",", ":")).encode("ascii")
        return dataclasses.replace(claims, traces=(b"\x07" * 32, claims.traces[1]),
                                   trace_ops=(tuple(ops), claims.trace_ops[1]))  # fmt: skip

    run = publish_tiny(tmp_path, identity, change=other_graph)
    result = invoke(tmp_path / "home", "verify-range", "0", "--run", str(run))
    assert result.exit_code == EXIT_MISMATCH, result.output
    init, step = [x for x in result.output.splitlines() if x.startswith(("init", "step"))]
    assert init.split()[:2] == ["init", "match"]
    assert step.split()[:3] == ["step", "0", "mismatch"], step
    assert "the op sequence differs at op 1" in step and "aten.forged.default" in step, step


def test_another_torch_build_is_refused_in_one_line(tmp_path):
    identity, _ = ensure_node_identity(tmp_path / "home")
    build = "torch 2.11.0+cpu (git 1a2b)"
    run = publish_tiny(tmp_path, identity, 1, lambda claims, states: dataclasses.replace(claims, torch_build=build))
    result = invoke(tmp_path / "home", "verify-range", "0", "--run", str(run))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == EXIT_USAGE, result.output
    assert len(lines) == 1 and build in lines[0] and "its own torch build" in lines[0]


def test_another_publisher_is_refused_before_the_script_runs(honest, tmp_path):
    home, run = honest
    other = generate_identity().public_key.hex()
    result = invoke(home, "verify-range", "0", "--run", str(run), "--publisher", other)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == EXIT_USAGE and len(lines) == 1 and "not signed by --publisher" in lines[0]
    many = invoke(home, "verify-range", "0", "--run", str(run), "--world-size", "2")
    assert many.exit_code == EXIT_USAGE and "a lab run replays in one process" in many.output
    against = invoke(home, "verify-range", "0", "--run", str(run), "--against", "reference")
    assert against.exit_code == EXIT_USAGE and "--against: a lab run replays once" in against.output
