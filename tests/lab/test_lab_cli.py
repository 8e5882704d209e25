"""`p2paudit train-script` and `verify-script`: a lab run published, signed, replayed; lies and other builds named."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import kernels
from p2paudit.cli import cli
from p2paudit.errors import EXIT_MISMATCH, EXIT_OK, EXIT_USAGE
from p2paudit.identity import ensure_node_identity
from p2paudit.lab import load_script, train_script
from p2paudit.run.digest import digest_bytes, format_digest
from p2paudit.run.lab_run import LAB_SIGNATURE_DOMAIN, lab_trace_path, publish_lab_run
from p2paudit.run.lab_run import SCRIPT_FILE as SCRIPT_FILE_NAME
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE, sign_body
from p2paudit.run.manifest_body import canonical_json
from p2paudit.tensor_digest import digest_state

REPO = Path(__file__).resolve().parents[2]
GPT2 = REPO / "examples" / "lab_gpt2.py"


def invoke(home: Path, *args: str):  # noqa: ANN201
    return CliRunner().invoke(cli, list(args), env={"P2PAUDIT_HOME": str(home)})


def test_train_script_then_verify_script_match(tmp_path):
    run = tmp_path / "run"
    trained = invoke(tmp_path / "home", "train-script", str(GPT2), str(run), "--steps", "2")
    assert trained.exit_code == EXIT_OK, trained.output
    body = json.loads((run / "manifest.json").read_bytes())
    assert body["torch_build"].startswith("torch 2.13.0") and body["op_table_version"] == 1
    assert body["arithmetic_version"] == kernels.ARITHMETIC_VERSION and body["script"]["source"] == GPT2.read_text()
    verified = invoke(tmp_path / "home", "verify-script", str(run))
    assert verified.exit_code == EXIT_OK, verified.output
    assert verified.output.splitlines() == ["step 0: match", "step 1: match"]
    (run / "manifest.json").write_bytes(
        (run / "manifest.json").read_bytes().replace(b'"backend":"cpu"', b'"backend":"xpu"')
    )
    tampered = invoke(tmp_path / "home", "verify-script", str(run))
    assert tampered.exit_code == EXIT_USAGE and "run id" in tampered.output


def publish(tmp_path: Path, change) -> Path:  # noqa: ANN001
    """A run of the GPT-2 script whose claims `change` rewrites, signed with the node key all the same."""
    script = load_script(GPT2)
    claims, states, batches = train_script(script, 2, values=True)
    run = tmp_path / "run"
    identity, _ = ensure_node_identity()
    publish_lab_run(run, script, change(claims, states), states, batches, identity)
    return run


def test_a_signed_lie_about_a_state_exits_1_naming_the_tensor(tmp_path, monkeypatch):
    monkeypatch.setenv("P2PAUDIT_HOME", str(tmp_path / "home"))

    def lie(claims, states):  # noqa: ANN001, ANN202
        forged = {k: v.copy() for k, v in states[2].items()}
        forged["params/ln_f.bias"].view(np.uint32)[3] ^= 1
        return dataclasses.replace(claims, states=(claims.states[0], digest_state(forged)))

    result = invoke(tmp_path / "home", "verify-script", str(publish(tmp_path, lie)))
    assert result.exit_code == EXIT_MISMATCH
    assert "step 0: match" in result.output
    assert (
        "step 1: MISMATCH; state after step 1 differs in 1 tensors: params/ln_f.bias; every op's outputs match"
        in result.output
    )


def test_another_torch_build_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("P2PAUDIT_HOME", str(tmp_path / "home"))
    run = publish(
        tmp_path, lambda claims, states: dataclasses.replace(claims, torch_build="torch 2.11.0+cpu (git 1a2b)")
    )
    result = invoke(tmp_path / "home", "verify-script", str(run))
    assert result.exit_code == EXIT_USAGE
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "torch 2.11.0+cpu (git 1a2b)" in lines[0] and "torch 2.13.0" in lines[0]


@pytest.mark.parametrize(
    "trace",
    [b'{"ops": 5, "values": null}', b'{"values": null}', b"[1, 2]", b'{"ops": ["mm"], "values": [["x"]]}'],
)
def test_a_signed_malformed_trace_is_refused_in_one_line(tmp_path, monkeypatch, trace):
    """A publisher signs a manifest whose trace file is not a trace: a one-line usage error, not a traceback."""
    monkeypatch.setenv("P2PAUDIT_HOME", str(tmp_path / "home"))
    run = publish(tmp_path, lambda claims, states: claims)
    trace_file = run / lab_trace_path(0)
    trace_file.write_bytes(trace)
    body = json.loads((run / MANIFEST_FILE).read_bytes())
    body["steps"][0]["trace_file"] = format_digest(digest_bytes(trace))
    identity, _ = ensure_node_identity()
    body_bytes, envelope = sign_body(body, identity, LAB_SIGNATURE_DOMAIN)  # a lab manifest's domain
    (run / MANIFEST_FILE).write_bytes(body_bytes)
    (run / SIGNATURE_FILE).write_bytes(canonical_json(envelope))
    result = invoke(tmp_path / "home", "verify-script", str(run))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == EXIT_USAGE, result.output
    assert len(lines) == 1 and str(trace_file) in lines[0], result.output


def test_a_script_changed_beside_its_signed_manifest_is_refused_before_it_runs(tmp_path, monkeypatch):
    """Whoever can write the run directory (a mirror, a cache) cannot get code run by a verifier."""
    monkeypatch.setenv("P2PAUDIT_HOME", str(tmp_path / "home"))
    run = publish(tmp_path, lambda claims, states: claims)
    marker = tmp_path / "ran"
    script = run / SCRIPT_FILE_NAME
    script.write_text(f"open({str(marker)!r}, 'w').close()\n" + script.read_text())
    result = invoke(tmp_path / "home", "verify-script", str(run))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == EXIT_USAGE, result.output
    assert len(lines) == 1 and "SHA-256 is not the manifest's" in lines[0], result.output
    assert not marker.exists()
