"""The lab mode on the triton backend (Triton interpreter, one subprocess: tests/lab/triton_probe.py) is the reference.

Every lab function's Triton kernel gives kernels/lab_math.py's bits; every op-table case (forward and
backward) gives the same bits on triton, reference and cpu at arithmetic versions 1 and 2, where stock
torch differs; a TinyGPT2 step and the tiny Llama script's step (trained with `train-script --backend
triton`, replayed with `verify-script`) give the reference backend's state digests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.errors import EXIT_USAGE
from p2paudit.lab.table import TABLE
from tests.lab.lab_runs import TINY_SCRIPT

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def probe() -> dict:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-m", "tests.lab.triton_probe"], capture_output=True, text=True,
                         timeout=900, env=env, cwd=str(REPO))  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.triton
def test_each_lab_function_is_lab_math_bit_for_bit(probe):
    functions = probe["functions"]
    assert {k: v for k, v in functions.items() if not k.startswith("baseline") and v} == {}
    assert functions["baseline numpy sin"] > 0 and functions["baseline numpy tanh"] > 0  # the inputs tell them apart
    assert probe["errors"] == []


@pytest.mark.slow
@pytest.mark.triton
def test_each_op_case_is_equal_on_three_backends_in_both_versions(probe):
    ops = probe["ops"]
    assert len(ops) >= 70
    for name, row in ops.items():
        for arithmetic in (1, 2):
            got = {row[f"{be} {arithmetic}"] for be in ("reference", "cpu", "triton")}
            assert len(got) == 1, f"{name}, arithmetic {arithmetic}: {row}"
    assert any(row["stock"] != row["reference 1"] for row in ops.values())  # stock torch: the failing baseline
    assert ops["matmul"]["triton 1"] != ops["matmul"]["triton 2"]  # the versions were both exercised


@pytest.mark.slow
@pytest.mark.triton
def test_every_table_entry_ran_on_triton(probe):
    # The one-op cases reach every entry but these: AdamW's two share one handler (ops_optim.fused_adamw), which
    # the whole steps below run on triton (float lr); arange is the table's own integer numpy on every backend.
    reached = set(probe["triton reached"]) | {"aten._fused_adamw_.default", "aten._foreach_add_.Scalar"}
    reached |= {"aten.arange.default", "aten.arange.start", "aten.arange.start_step", "aten._fused_adamw_.tensor_lr"}
    assert sorted(set(TABLE) - reached) == []


@pytest.mark.slow
@pytest.mark.triton
def test_a_gpt2_step_on_triton_is_the_reference(probe):
    step = probe["gpt2 step v1"]
    assert step["triton"] == step["reference"]


@pytest.mark.slow
@pytest.mark.triton
def test_train_script_on_triton_publishes_the_reference_state_and_replays(probe):
    cli_run = probe["cli"]
    assert cli_run["train"][0] == 0, cli_run["train"][1]
    assert f"\nstep 0 state {cli_run['reference state']} trace sha256:" in cli_run["train"][1]
    assert cli_run["backend"] == "triton"
    assert cli_run["verify"] == [0, "step 0: match\n"]


def test_train_script_on_triton_without_a_device_is_refused_in_one_line(tmp_path):
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("this process has a triton device (the interpreter)")
    script = tmp_path / "lab_tiny.py"
    script.write_text(TINY_SCRIPT)
    args = ["train-script", str(script), str(tmp_path / "run"), "--steps", "1", "--backend", "triton"]
    result = CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(tmp_path / "home")})
    assert result.exit_code == EXIT_USAGE, result.output
    assert "backend triton is not available here: triton backend needs CUDA or TRITON_INTERPRET=1" in result.output
