"""benchmarks/gpu_check.py: refuses to run without CUDA, and its CPU-side parts work.

The real run needs a GPU; here the script's dry run (TRITON_INTERPRET=1
--quick) goes through every stage but the PTX audit and the golden run, its
prepared CPU digests (both arithmetic versions) are checked against the
reference backend, and the golden-run and lab-step stages are run on the cpu backend.
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
    stored = json.loads(gpu_check.DIGESTS.read_text())
    assert stored["seed"] == gpu_check.SEED and stored["sizes"] == gpu_check.SIZES, "stale: rerun --prepare"
    names = [w.name for w in gpu_check.workloads()]
    assert sorted(stored["digests"]["full"]) == sorted(names), "stale: rerun --prepare"
    for w in gpu_check.workloads():
        reference = gpu_check.backend("reference", w.arithmetic)
        got = gpu_check.digest(getattr(reference, w.op)(*gpu_check.make_inputs(w, "quick")))
        assert got == stored["digests"]["quick"][w.name], f"{w.name}: reference differs from the prepared cpu digest"


def test_every_fold_is_checked_in_both_versions_on_the_same_inputs(gpu_check):
    from kernels.versions import FOLDS

    by_name = {w.name: w for w in gpu_check.workloads()}
    folds = [w for w in by_name.values() if w.op in FOLDS and w.arithmetic == 1]
    assert {w.op for w in folds} == set(FOLDS)
    stored = json.loads(gpu_check.DIGESTS.read_text())["digests"]
    for w in folds:
        twin = by_name[f"{w.name}@v2"]
        assert (twin.op, twin.inputs, twin.arithmetic) == (w.op, w.inputs, 2)
        assert gpu_check.make_inputs(twin, "quick")[0].tobytes() == gpu_check.make_inputs(w, "quick")[0].tobytes()
        for size in ("quick", "full"):  # the inputs tell the versions apart: a v1 fold cannot pass as v2
            assert stored[size][w.name] != stored[size][twin.name], (size, w.name)
    assert not [w.name for w in by_name.values() if w.op not in FOLDS and w.arithmetic != 1]


def test_golden_stage_reaches_both_digests_on_the_cpu_backend(gpu_check, tmp_path):
    from p2paudit.run.golden import GOLDEN_TINY_DIGESTS

    report = gpu_check.Report(
        tmp_path, {"device": "d", "mode": "cuda", "size": "full", "torch": "t", "triton": "t", "when": "now"}
    )
    gpu_check.check_golden(report, "cpu")
    golden = json.loads((tmp_path / "gpu_check.json").read_text())["golden"]
    assert sorted(golden) == ["v1", "v2"]
    for version in (1, 2):
        row = golden[f"v{version}"]
        assert row["equal"] and row["digest"] == GOLDEN_TINY_DIGESTS[version], row
    assert not report.failed()
    assert "Golden tiny run v2: equal (sha256:" in (tmp_path / "gpu_check.md").read_text()


def test_lab_step_stage_reaches_the_golden_digests_and_reports_a_difference(gpu_check, tmp_path, monkeypatch):
    from tests.lab import test_lab_golden

    report = gpu_check.Report(
        tmp_path, {"device": "d", "mode": "cuda", "size": "quick", "torch": "t", "triton": "t", "when": "now"}
    )
    gpu_check.check_lab_steps(report, quick=True, backend_name="cpu")
    assert report.data["cases"] == {"lab step llama@v2": []} and not report.failed()
    golden = list(test_lab_golden.GOLDEN[("llama", 2)])
    golden[1] = (golden[1][0], golden[1][1], "0" * 64)  # step 1's value trace, as if another backend's
    monkeypatch.setitem(test_lab_golden.GOLDEN, ("llama", 2), golden)
    gpu_check.check_lab_steps(report, quick=True, backend_name="cpu")
    assert report.data["cases"] == {
        "lab step llama@v2": ["step 1: not the golden digests, yet every op's output is the cpu backend's"]
    }  # fmt: skip
    assert report.failed()


@pytest.mark.slow
def test_interpreter_dry_run_checks_every_op(tmp_path):
    proc = _run(["--quick", "--skip-cases", "--out", str(tmp_path)], {"TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert len(report["ops"]) == 28  # 22 ops, the 6 that fold dot products again at version 2
    assert sorted(o["name"] for o in report["ops"] if o["arithmetic"] == 2) == [
        "attention@v2", "attention_backward@v2", "bmm@v2", "matmul@v2", "matmul_nt@v2", "matmul_tn@v2"
    ]  # fmt: skip
    assert report["golden"] == {}  # --quick: the interpreter would take minutes per step
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
    report.data["audit"] = {}
    want = "sha256:" + "0" * 64
    report.data["golden"] = {"v2": {"equal": False, "digest": "sha256:" + "1" * 64, "want": want, "s_per_step": 0.1}}
    assert report.failed()
    report.save()
    assert (
        f"Golden tiny run v2: DIFFERENT (sha256:{'1' * 64}, 0.10 s/step; want {want})"
        in (tmp_path / "gpu_check.md").read_text()
    )
