"""Every Triton kernel compiles for sm_90 and its PTX keeps the canonical arithmetic.

No GPU is needed: Triton ships ptxas, and P2PAUDIT_TRITON_COMPILE_ONLY=1 lets
kernels/triton_ptx.py build the real (not interpreted) kernels. The audit
refuses fused multiply-adds, approximate division/sqrt/transcendentals,
flush-to-zero and hardware min/max in the PTX, and fast-math flags or fma
intrinsics in the LLVM IR; arithmetic version 2's fold (matmul_kernel with
FUSED=True) must hold fma.rn.f32 and no other multiply-add form. The failing
baseline: the same kernel compiled with fp fusion left on does contain fma,
and the audit says so.
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
        audits[spec.name] = {
            "problems": P.audit(asm, spec.fused),
            "fused": spec.fused,
            "fma_rn": ptx.count("fma.rn.f32"),
            "unfused_problems": P.audit(asm),  # the same PTX held to version 1's rules
            "div_rn": "div.rn.f32" in ptx,
            "sqrt_rn": "sqrt.rn.f32" in ptx,
        }
    fused = P.compile_spec(P.KernelSpec(tr.adamw_kernel, {"BLOCK": 1024}), arch=90, fusion=True)
    fast_llir = "%r = fadd reassoc nsz float %a, %b\n%s = call float @llvm.fmuladd.f32(float %a, float %b, float %c)"
    return {
        "audits": audits,
        "fused_problems": P.audit(fused),
        "fast_llir_problems": P.audit({"ptx": "", "llir": fast_llir}),
        "v2_planted": {
            ptx: P.audit({"ptx": ptx, "llir": llir}, fused=True)
            for ptx, llir in (
                ("fma.rn.f32 %f1, %f2, %f3, %f4;\nmad.rn.f32 %f5, %f2, %f3, %f4;", ""),
                ("fma.rn.f32 %f1, %f2, %f3, %f4;\nfma.rz.f32 %f5, %f2, %f3, %f4;", ""),
                ("fma.rn.f32 %f1, %f2, %f3, %f4;", "%v = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %a)"),
                ("mul.rn.f32 %f1, %f2, %f3;\nadd.rn.f32 %f4, %f1, %f5;", ""),
            )
        },
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
    lab_rsqrt = a["lab_unary_kernel[OP=4,BLOCK=1024]"]  # op table 1's rsqrt: 1 / sqrt(x), both correctly rounded
    assert lab_rsqrt["div_rn"] and lab_rsqrt["sqrt_rn"]


def test_the_lab_functions_are_audited(results):
    # kernels/triton_lab_kernels.py: sin, cos, tanh, gelu, rsqrt, reciprocal, sigmoid, exp(x * c); gelu's backward.
    lab = [name for name in results["audits"] if name.startswith(("lab_unary_kernel[", "gelu_backward_kernel["))]
    assert len(lab) == 9, sorted(results["audits"])
    dividing = [name for name in lab if not name.startswith(("lab_unary_kernel[OP=0,", "lab_unary_kernel[OP=1,",
                                                             "lab_unary_kernel[OP=7,"))]  # fmt: skip
    assert len(dividing) == 6 and all(results["audits"][name]["div_rn"] for name in dividing)  # tanh, gelu, 1/x ...


def test_the_version_2_fold_is_one_fma_rn_per_step(results):
    fused = {name: a for name, a in results["audits"].items() if a["fused"]}
    assert len(fused) == 2, sorted(results["audits"])  # with and without the scale
    for name, a in fused.items():
        assert a["fma_rn"] > 0 and not a["problems"], (name, a)
        assert any(p.startswith("fused multiply-add") for p in a["unfused_problems"]), (name, a)  # it is fused
    unfused = results["audits"]["matmul_kernel[BM=64,BN=64,HAS_SCALE=False,FUSED=False]"]
    assert unfused["fma_rn"] == 0 and not unfused["problems"]


def test_the_version_2_audit_refuses_every_other_multiply_add(results):
    mad, fma_rz, fmuladd, unfused = results["v2_planted"].values()
    assert mad == ["fused multiply-add: mad.rn.f32 x1"], mad
    assert fma_rz == ["fused multiply-add: fma.rz.f32 x1"], fma_rz
    assert fmuladd == ["fused multiply-add intrinsic: @llvm.fmuladd.v4f32 x1"], fmuladd
    assert unfused == ["no fma.rn.f32 in a fused fold"], unfused  # a v2 kernel compiled as v1


def test_fusion_left_on_is_caught(results):
    # The failing baseline: Triton's default would contract a*b+c; the audit must see it.
    assert any(p.startswith("fused multiply-add") for p in results["fused_problems"]), results["fused_problems"]


def test_fast_math_in_llvm_ir_is_caught(results):
    found = results["fast_llir_problems"]
    assert any(p.startswith("fast-math flags") for p in found), found
    assert any(p.startswith("fused multiply-add intrinsic") for p in found), found


if __name__ == "__main__":
    print(json.dumps(probe()))
