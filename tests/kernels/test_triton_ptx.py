"""Every Triton kernel compiles for sm_90 and its PTX keeps the canonical arithmetic.

No GPU is needed: Triton ships ptxas, and P2PAUDIT_TRITON_COMPILE_ONLY=1 lets
kernels/triton_ptx.py build the real (not interpreted) kernels. The audit
refuses fused multiply-adds, approximate division/sqrt/transcendentals,
flush-to-zero and hardware min/max in the PTX, and fast-math flags or fma
intrinsics in the LLVM IR. The failing baseline: the same kernel
compiled with fp fusion left on does contain fma, and the audit says so.
The compiles run in one subprocess (this file, run as a script).
"""

from __future__ import annotations

import json

import pytest
from conftest import run_probe

pytestmark = [pytest.mark.triton, pytest.mark.slow]


def probe() -> dict:
    """Compile every kernel spec (fusion off) and one with fusion on; audit their PTX."""
    from kernels import triton_ptx as P
    from kernels import triton_rows as tr

    audits = {}
    for spec in P.kernel_specs():
        asm = P.compile_spec(spec, arch=90)
        ptx = asm["ptx"]
        audits[spec.name] = {"problems": P.audit(asm), "div_rn": "div.rn.f32" in ptx, "sqrt_rn": "sqrt.rn.f32" in ptx}
    fused = P.compile_spec(P.KernelSpec(tr.adamw_kernel, {"BLOCK": 1024}), arch=90, fusion=True)
    fast_llir = "%r = fadd reassoc nsz float %a, %b\n%s = call float @llvm.fmuladd.f32(float %a, float %b, float %c)"
    return {
        "audits": audits,
        "fused_problems": P.audit(fused),
        "fast_llir_problems": P.audit({"ptx": "", "llir": fast_llir}),
    }


@pytest.fixture(scope="module")
def results() -> dict:
    env = {"P2PAUDIT_TRITON_COMPILE_ONLY": "1", "TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""}
    return run_probe("test_triton_ptx.py", [], env, timeout=900)


def test_every_kernel_compiles_without_forbidden_instructions(results):
    assert len(results["audits"]) >= 20, sorted(results["audits"])
    bad = {name: a["problems"] for name, a in results["audits"].items() if a["problems"]}
    assert not bad, json.dumps(bad, indent=1)


def test_division_and_sqrt_are_the_correctly_rounded_ones(results):
    a = results["audits"]
    assert a["adamw_kernel[BLOCK=1024]"]["div_rn"] and a["adamw_kernel[BLOCK=1024]"]["sqrt_rn"]
    assert a["rmsnorm_forward_kernel[BLOCK=1024]"]["sqrt_rn"]
    assert a["unary_kernel[OP=1,BLOCK=1024]"]["div_rn"]  # log's s = f / (2 + f)


def test_fusion_left_on_is_caught(results):
    # The failing baseline: Triton's default would contract a*b+c; the audit must see it.
    assert any(p.startswith("fused multiply-add") for p in results["fused_problems"]), results["fused_problems"]


def test_fast_math_in_llvm_ir_is_caught(results):
    found = results["fast_llir_problems"]
    assert any(p.startswith("fast-math flags") for p in found), found
    assert any(p.startswith("fused multiply-add intrinsic") for p in found), found


if __name__ == "__main__":
    print(json.dumps(probe()))
