"""benchmarks/gpu_check.py: refuses to run without CUDA, and its CPU-side parts work.

The real run needs a GPU; here the script's dry run (TRITON_INTERPRET=1
--quick) goes through every stage but the PTX audit, and its prepared CPU
digests are checked against the reference backend.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO

pytestmark = pytest.mark.triton
SCRIPT = REPO / "benchmarks" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _run(args: list[str], env_extra: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=str(REPO), timeout=900
    )


def test_without_cuda_it_exits_2_with_a_message(tmp_path):
    proc = _run(["--out", str(tmp_path)], {"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "gpu_check needs a CUDA GPU" in proc.stderr
    assert not (tmp_path / "gpu_check.json").exists()


def test_digest_sees_bits_but_not_nan_payloads(gpu_check):
    x = np.array([1.0, -0.0, np.nan], dtype=np.float32)
    same_nan = x.copy()
    same_nan.view(np.uint32)[2] = 0xFFC00001  # another NaN
    assert gpu_check.digest(x) == gpu_check.digest(same_nan)
    flipped = x.copy()
    flipped[1] = 0.0  # the sign of zero
    assert gpu_check.digest(x) != gpu_check.digest(flipped)
    assert gpu_check.digest(x) != gpu_check.digest(x.reshape(3, 1))  # the shape


def test_prepared_digests_match_the_reference_backend(gpu_check):
    from kernels import reference

    stored = json.loads(gpu_check.DIGESTS.read_text())
    assert stored["seed"] == gpu_check.SEED and stored["sizes"] == gpu_check.SIZES, "stale: rerun --prepare"
    names = [w.name for w in gpu_check.workloads()]
    assert sorted(stored["digests"]["full"]) == sorted(names), "stale: rerun --prepare"
    for i, w in enumerate(gpu_check.workloads()):
        got = gpu_check.digest(getattr(reference, w.op)(*gpu_check.make_inputs(w, i, "quick")))
        assert got == stored["digests"]["quick"][w.name], f"{w.name}: reference differs from the prepared cpu digest"


@pytest.mark.slow
def test_interpreter_dry_run_checks_every_op(tmp_path):
    proc = _run(["--quick", "--skip-cases", "--out", str(tmp_path)], {"TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert len(report["ops"]) == 22
    unequal = [o["name"] for o in report["ops"] if not o["equal"]]
    assert not unequal, unequal
    assert {o["cpu_digest"] for o in report["ops"]} == {"prepared"}
    assert all(o["triton_ms"] > 0 and o["torch_ms"] > 0 for o in report["ops"])
    assert "| attention_backward |" in (tmp_path / "gpu_check.md").read_text()


def test_report_marks_errors_and_differences_as_failures(gpu_check, tmp_path):
    report = gpu_check.Report(
        tmp_path, {"device": "d", "mode": "cuda", "size": "quick", "torch": "t", "triton": "t", "when": "now"}
    )
    ok = {
        "name": "exp",
        "shapes": [[3]],
        "equal": True,
        "cpu_digest": "prepared",
        "triton_ms": 1.0,
        "torch_ms": 0.5,
        "ratio": 2.0,
    }
    report.data["ops"] = [ok]
    assert not report.failed()
    bad = dict(ok, name="log", equal=False, difference="output 0: 1 of 3 values differ, first at (0,)")
    report.data["ops"] = [ok, bad, {"name": "silu", "shapes": [], "equal": False, "error": "RuntimeError: boom"}]
    assert report.failed()
    report.save()
    md = (tmp_path / "gpu_check.md").read_text()
    assert "| log | 3 | NO (prepared) |" in md and "- log: output 0: 1 of 3 values differ" in md
    assert "| silu | | ERROR RuntimeError: boom |" in md
    report.data["ops"] = [ok]
    report.data["audit"] = {"k": {"problems": ["fused multiply-add: fma.rn.f32 x1"], "compile_s": 1.0}}
    assert report.failed()
