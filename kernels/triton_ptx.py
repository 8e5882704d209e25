"""Compile every Triton kernel for a CUDA target and audit the PTX it produces.

The interpreter proves the kernels' arithmetic; this proves the compiler keeps
it: no fused multiply-add on float32 (enable_fp_fusion=False), no approximate
division, reciprocal, square root or transcendental, no flush-to-zero. The one
exception is arithmetic version 2's fold (matmul_kernel with FUSED=True): there
the correctly rounded `fma.rn.f32` is the primitive the spec names, so it is
required, and every other multiply-add form (mad, fma with another rounding
mode, LLVM's fmuladd, which may round twice) is still refused. It runs
without a GPU (Triton ships ptxas), given P2PAUDIT_TRITON_COMPILE_ONLY=1 or
CUDA, and again on the GPU in benchmarks/gpu_check.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kernels.triton_math import MODE  # first: the device check

if MODE == "interpret":
    raise ImportError(
        "kernels.triton_ptx compiles real kernels: unset TRITON_INTERPRET (use CUDA or P2PAUDIT_TRITON_COMPILE_ONLY=1)"
    )

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kernels import triton_kernels as tk  # noqa: E402
from kernels import triton_lab_kernels as tlab  # noqa: E402
from kernels import triton_rows as tr  # noqa: E402

# Instructions that would break bitwise equality with the CPU backends.
FORBIDDEN = {
    "fused multiply-add": re.compile(r"\b(fma|mad)(\.[a-z0-9]+)*\.f32\b"),
    "approximate or full-range division": re.compile(r"\bdiv\.(approx|full)(\.[a-z0-9]+)*\.f32\b"),
    "approximate reciprocal or square root": re.compile(r"\b(rcp|rsqrt|sqrt)\.approx(\.[a-z0-9]+)*\.f32\b"),
    "hardware transcendental": re.compile(r"\b(ex2|lg2|sin|cos|tanh)\.approx\b"),
    "flush-to-zero arithmetic": re.compile(r"\b[a-z0-9]+(\.[a-z0-9]+)*\.ftz\b"),  # any instruction, neg and cvt too
    # max.f32/min.f32 return the non-NaN operand and may pick either zero: not max2.
    "hardware min/max": re.compile(r"\b(max|min)(\.[a-zA-Z0-9]+)*\.f32\b"),
    "tensor-core matrix product": re.compile(r"\b(mma|wgmma)\b"),
}


# In the LLVM IR: fast-math flags that let LLVM reassociate, contract, use
# reciprocals or approximations, or ignore the sign of zero. (nnan and ninf are
# allowed: LLVM adds them itself where it has proved them, e.g. on m * 0.5 in
# log, where m is built from bits in [1, 2); they change no value.)
FORBIDDEN_LLIR = {
    "fast-math flags": re.compile(r"= f(add|sub|mul|div)( [a-z]+)*? (fast|reassoc|contract|nsz|arcp|afn)\b"),
    "fused multiply-add intrinsic": re.compile(r"@llvm\.(fma|fmuladd)\.(v\d+)?f32\b"),  # scalar or vector
}

# A version 2 fold (FUSED=True): the round-to-nearest fma is its primitive, any other multiply-add is not.
FUSED_FMA = re.compile(r"\bfma\.rn\.f32\b")
FORBIDDEN_FUSED = dict(FORBIDDEN)
FORBIDDEN_FUSED["fused multiply-add"] = re.compile(r"\b(mad(\.[a-z0-9]+)*|fma(?!\.rn\.f32\b)(\.[a-z0-9]+)*)\.f32\b")
FORBIDDEN_LLIR_FUSED = dict(FORBIDDEN_LLIR)
FORBIDDEN_LLIR_FUSED["fused multiply-add intrinsic"] = re.compile(r"@llvm\.fmuladd\.(v\d+)?f32\b")


@dataclass(frozen=True)
class KernelSpec:
    """One kernel with one choice of compile-time constants."""

    kernel: Any  # a @triton.jit function: Triton ships no type information
    constexprs: dict[str, int]
    int_ptrs: tuple[str, ...] = ()

    @property
    def fused(self) -> bool:
        """True for arithmetic version 2's fold, whose PTX must hold fma.rn.f32."""
        return bool(self.constexprs.get("FUSED", False))

    @property
    def name(self) -> str:
        consts = ",".join(f"{k}={v}" for k, v in self.constexprs.items())
        return f"{self.kernel.__name__}[{consts}]"

    def signature(self) -> dict[str, str]:
        """Triton signature: *_ptr arguments are float32 pointers (int64 if listed), others int32."""
        sig = {}
        for arg in self.kernel.arg_names:
            if arg in self.constexprs:
                sig[arg] = "constexpr"
            elif arg.endswith("_ptr"):
                sig[arg] = "*i64" if arg in self.int_ptrs else "*fp32"
            else:
                sig[arg] = "i32"
        return sig


def kernel_specs() -> list[KernelSpec]:
    """Every kernel of the backend and of the lab functions, with the constexpr variants that change its code."""
    S = KernelSpec
    specs = [
        S(tk.matmul_kernel, {"BM": 64, "BN": 64, "HAS_SCALE": s, "FUSED": f})
        for f in (False, True)
        for s in (False, True)
    ]
    specs += [
        S(tk.row_tree_kernel, {"BR": max(1, 4096 >> w), "LOG2W": w, "IS_MAX": m})
        for w in (0, 10)
        for m in (False, True)
    ]
    specs += [S(tk.fold_kernel, {"LOG2G": 3, "BW": 128, "IS_MAX": m}) for m in (False, True)]
    specs += [S(tk.unary_kernel, {"OP": op, "BLOCK": 1024}) for op in (0, 1, 2)]
    specs += [S(tk.silu_backward_kernel, {"BLOCK": 1024})]
    specs += [S(k, {"BR": 4, "LOG2T": 10}) for k in (tk.softmax_causal_kernel, tk.softmax_causal_backward_kernel)]
    flat = {"BLOCK": 1024}
    specs += [
        S(k, flat)
        for k in (
            tr.mul_kernel,
            tr.add_kernel,
            tr.rope_kernel,
            tr.rmsnorm_forward_kernel,
            tr.rmsnorm_backward_parts_kernel,
            tr.rmsnorm_backward_dx_kernel,
            tr.shifted_exp_kernel,
            tr.divide_kernel,
            tr.adamw_kernel,
        )
    ]
    specs += [
        S(tr.row_loss_kernel, flat, ("t_ptr",)),
        S(tr.cross_entropy_grad_kernel, flat, ("t_ptr",)),
        S(tr.gather_rows_kernel, flat, ("idx_ptr",)),
        S(tr.scatter_rows_kernel, {"BC": 128}, ("order_ptr", "start_ptr")),
    ]
    # Op table 1's lab functions (kernels/triton_lab.py): each OP of the unary kernel is its own code.
    specs += [S(tlab.lab_unary_kernel, {"OP": op, "BLOCK": 1024}) for op in range(tlab.EXP_SCALED + 1)]
    specs += [S(tlab.gelu_backward_kernel, flat)]
    return specs


def compile_spec(spec: KernelSpec, arch: int = 90, fusion: bool = False) -> dict[str, str]:
    """Compile `spec` for sm_<arch> (down to a cubin, so ptxas checks it too).

    Returns {"ptx": ..., "llir": ...}. `fusion=True` is Triton's default and
    is only for showing that the audit catches what it allows.
    """
    src = ASTSource(fn=spec.kernel, signature=spec.signature(), constexprs=spec.constexprs)
    compiled = triton.compile(
        src, target=GPUTarget("cuda", arch, 32), options={"enable_fp_fusion": fusion, "num_warps": 4}
    )
    return {"ptx": compiled.asm["ptx"], "llir": compiled.asm["llir"]}


def _find(patterns: dict[str, re.Pattern[str]], text: str) -> list[str]:
    found = []
    for what, pattern in patterns.items():
        hits = [m.group(0) for m in pattern.finditer(text)]
        if hits:
            found.append(f"{what}: {hits[0]} x{len(hits)}")
    return found


def audit_ptx(ptx: str, fused: bool = False) -> list[str]:
    """The forbidden instructions in `ptx`, one line each ("fused multiply-add: fma.rn.f32 x3").

    `fused`: the kernel is a version 2 fold, so fma.rn.f32 is allowed and
    must be there ("no fma.rn.f32 in a fused fold" otherwise: the fold
    would have been compiled as version 1's two roundings).
    """
    if not fused:
        return _find(FORBIDDEN, ptx)
    missing = [] if FUSED_FMA.search(ptx) else ["no fma.rn.f32 in a fused fold"]
    return missing + _find(FORBIDDEN_FUSED, ptx)


def audit(asm: dict[str, str], fused: bool = False) -> list[str]:
    """Forbidden instructions in the PTX and fast-math flags or fma intrinsics in the LLVM IR (see audit_ptx)."""
    return audit_ptx(asm["ptx"], fused) + _find(FORBIDDEN_LLIR_FUSED if fused else FORBIDDEN_LLIR, asm["llir"])
