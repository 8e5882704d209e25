"""The machine code of every version 1 `cpu` kernel holds no fused multiply-add, and matmul is vectorised;
version 2's matmul (matmul_packed_fused) folds with packed FMA instructions, or calls libm's fmaf on a
processor without them.

The code searched is the code that runs: each kernel is called on sample
inputs (compiled, or loaded from numba's cache), and the object code numba
keeps in its cache for every signature of the dispatcher (its prange bodies
linked in) is disassembled with objdump (binutils). numba loads a cached
kernel without its assembly, and compiling each kernel afresh to read it
cost 4-27 s a kernel (267 s of CPU in the CI run of 2026-12-06); the cached
object's instructions were seen to be the fresh compile's, mnemonic for
mnemonic, on matmul_packed, matmul_packed_fused and square_sum_flat. A kernel
with no cache entry is compiled afresh with its own options (parallel, no
fastmath, no cache) and its assembly read instead. A fastmath build of
a*b+c shows the search does find FMAs on this processor (the failing
baseline), in LLVM's assembly and in objdump's disassembly of the same code.

A pass is kept in tests/verdict_cache.py's folder under a key of everything the
machine code depends on (the kernel modules' sources and the kernels modules they import, this file, numba's and
llvmlite's versions, the processor's model and flags, numba's code-generation
environment): a run with the same key reuses it, any changed part checks again.
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

from kernels import cpu_attention as ca
from kernels import cpu_attention_recompute as car
from kernels import cpu_elementwise as ew
from kernels import cpu_lab_math as lm
from kernels import cpu_matmul as mm
from kernels import cpu_nn as nn
from kernels import cpu_pack as pk
from kernels import cpu_reduce as rd
from tests.verdict_cache import REPO, VerdictCache, import_closure, machine_code_key

F32 = np.float32
FMA = re.compile(r"\bv?f(?:n?m(?:add|sub)|madd|msub)\w*", re.IGNORECASE)
PACKED_MUL = re.compile(r"\bvmulps\s+[^\n]*%[yz]mm")
PACKED_ADD = re.compile(r"\bvaddps\s+[^\n]*%[yz]mm")
REGISTER_ADD = re.compile(r"\bvaddps\s+%[xyz]mm\d+, %[xyz]mm\d+, %[xyz]mm\d+")  # accumulator in a register
_ROWS_GEOMETRY = np.array([1, 1, 5, 7, 0, 0, 7, 1, 0, 0, 7, 1, 2, 7], np.int64)  # binary_rows over (5, 7)
_ROWS_GEOMETRY.flags.writeable = False  # as kernels/cpu_lab.py's plans: the signature that runs, which is cached


def _attention_outputs():
    """o, p, lse, K's and V's panels for _attention_rows on (2, 5, 5) operands."""
    return (np.empty((2, 5, 5), F32), np.empty((2, 5, 5), F32), np.empty(10, F32)) + tuple(
        np.empty((2, 1, 5, 32), F32) for _ in range(2)
    )


def _grads():
    """ds, V's key panels, k's, do's and q's column panels, dq, dk, dv for the backward on (2, 5, 5) operands."""
    panels = tuple(np.empty((2, 1, 5, 32), F32) for _ in range(4))
    return (np.empty((2, 5, 5), F32), *panels, *(np.empty((2, 5, 5), F32) for _ in range(3)))


def _recomputed():
    """K's and V's key panels, k's, do's and q's column panels, lse, a block's p and dS rows, the dv and dk
    accumulators, dq, dk, dv for the backward that recomputes p, on (2, 5, 5) operands (one block of 12 rows)."""
    panels = tuple(np.empty((2, 1, 5, 32), F32) for _ in range(5))
    rows = tuple(np.empty((2, 12, 12), F32) for _ in range(2))
    accumulators = tuple(np.zeros((2, 12, 32), F32) for _ in range(2))
    return (*panels, np.empty(10, F32), *rows, *accumulators, *(np.empty((2, 5, 5), F32) for _ in range(3)))


def _sample_calls():
    """(name, dispatcher, args) for every numba kernel of the backend, on tiny inputs."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 7)).astype(F32)
    s = rng.standard_normal((2, 5, 5)).astype(F32)
    flat = x.reshape(-1)
    idx = np.array([1, 0, 1], dtype=np.int64)
    a3 = x[None]
    ap = np.zeros(pk.a_panels_shape(1, 5, 7), F32)
    bp = np.zeros((1, 1, 7, mm.TILE_COLS), F32)
    run = np.zeros((numba.config.NUMBA_NUM_THREADS, 1, 7, mm.TILE_COLS), F32)  # a thread's B panels
    scalars = tuple(F32(v) for v in (0.9, 0.1, 0.95, 0.05, 0.01, 0.5, 0.99, 1e-8))
    return [
        ("pack_operands", pk.pack_operands, (a3, False, a3, True, ap, bp, 1, 1)),
        ("matmul_packed", mm.matmul_packed, (ap, bp, np.empty((1, 5, 5), F32), mm.FULL, 1, 1)),
        (
            "matmul_streamed",
            mm.matmul_streamed,
            (ap, np.ones((1, 5, 7), F32), True, np.empty((1, 5, 5), F32), 1, 1, run),
        ),
        (
            "matmul_rows",
            mm.matmul_rows,
            (a3, False, np.ones((1, 5, 7), F32), True, np.empty((1, 5, 5), F32), 1, ap[:, 0], run),
        ),
        ("masked_zeros", mm.masked_zeros, (a3,)),
        ("sum_rows_2d", rd.sum_rows_2d, (x,)),
        ("_sum_cols_registers", rd._sum_cols_registers, (np.ones((20, 32), F32),)),
        ("_sum_cols_buffered", rd._sum_cols_buffered, (x,)),
        ("max_rows_2d", rd.max_rows_2d, (x,)),
        ("square_sum_flat", rd.square_sum_flat, (flat,)),
        ("add_flat", ew.add_flat, (flat, flat, np.empty_like(flat))),
        ("scale_flat", ew.scale_flat, (flat, F32(0.5), np.empty_like(flat))),
        ("binary_rows", ew.binary_rows, (ew.MULTIPLY, flat, flat, np.empty_like(flat), _ROWS_GEOMETRY)),
        ("one_hot_rows", ew.one_hot_rows, (np.array([2, -1, 0, 6, 1], np.int64), F32(-0.2), np.empty_like(x))),
        ("exp_flat", ew.exp_flat, (flat,)),
        ("unary_flat", lm.unary_flat, (lm.SIN, flat, np.empty_like(flat))),  # every function: op is a runtime value
        ("gelu_tanh_backward_flat", lm.gelu_tanh_backward_flat, (flat, flat, np.empty_like(flat))),
        ("exp_scaled_flat", lm.exp_scaled_flat, (flat, F32(0.5), np.empty_like(flat))),
        ("_unary_serial", lm._unary_serial, (lm.SIN, flat, np.empty_like(flat))),
        ("_gelu_backward_serial", lm._gelu_backward_serial, (flat, flat, np.empty_like(flat))),
        ("_exp_scaled_serial", lm._exp_scaled_serial, (flat, F32(0.5), np.empty_like(flat))),
        ("_log_one", lm._log_one, (F32(2.0),)),
        ("log_flat", ew.log_flat, (flat,)),
        ("silu_flat", ew.silu_flat, (flat,)),
        ("silu_backward_flat", ew.silu_backward_flat, (flat, flat)),
        ("adamw_into", ew.adamw_into, (flat, flat, flat, np.abs(flat), *scalars, *(np.empty_like(flat),) * 3)),
        ("softmax_causal_3d", nn.softmax_causal_3d, (s,)),
        ("softmax_causal_backward_3d", nn.softmax_causal_backward_3d, (s, s)),
        ("rmsnorm_2d", nn.rmsnorm_2d, (x, x[0], F32(1e-5))),
        ("rmsnorm_backward_rows", nn.rmsnorm_backward_rows, (x, x[0], x[:, 0].copy(), x)),
        ("cross_entropy_rows", nn.cross_entropy_rows, (x, np.array([0, 6, 2, 3, 1], dtype=np.int64))),
        (
            "cross_entropy_backward_2d",
            nn.cross_entropy_backward_2d,
            (x, np.zeros(5, np.int64), F32(0.2), np.empty_like(x)),
        ),
        ("embedding_gather", nn.embedding_gather, (x, idx)),
        ("embedding_scatter_add", nn.embedding_scatter_add, (idx, x[:3].copy(), np.zeros((2, 7), F32))),
        ("log_softmax_2d", nn.log_softmax_2d, (x, np.empty_like(x))),
        ("log_softmax_backward_2d", nn.log_softmax_backward_2d, (x, x, np.empty_like(x))),
        ("pack_keys", ca.pack_keys, (s, np.empty((2, 1, 5, 32), F32))),
        ("pack_columns", ca.pack_columns, (s, np.empty((2, 1, 5, 32), F32))),
        ("_attention_rows", ca._attention_rows, (s, F32(0.5), False, True, *_attention_outputs())),
        ("_panel_v1", ca._panel_v1, (s, 1, 0, F32(0.5), False, True, *_attention_outputs())),
        *(
            (f"_phases[{phase}]", car._phases, (phase, 0, 5, (s, s, F32(0.5), False, False, False, *r[:6]), r[6:]))
            for phase in (car.HEADS, car.ROWS, car.KEYS, car.STORE)
            for r in [_recomputed()]
        ),
        (
            "key_fold_v1",
            car.key_fold_v1,
            (*np.zeros((2, 12, 12), F32), 1, 0, 0, 5, False, False, *_recomputed()[3:5], *np.zeros((2, 12, 32), F32)),
        ),
        (
            "_attention_backward",
            ca._attention_backward,
            (False, s, np.abs(s), F32(0.5), False, False, False, *_grads()),
        ),
        (
            "query_panel_v1",
            ca.query_panel_v1,
            (s, np.abs(s)[1], _grads()[0][1], 1, 0, F32(0.5), False, *_grads()[1:3], np.empty_like(s)),
        ),
        (
            "softmax_rows_v1",
            ca.softmax_rows_v1,
            (s, 1, 0, F32(0.5), _attention_outputs()[3], s[1].copy(), np.empty(10, F32)),
        ),
        (
            "_key_panel_v1",
            ca._key_panel_v1,
            (np.abs(s), s, 1, 1, 0, F32(0.5), False, False, *_grads()[3:5], *_grads()[6:]),
        ),
    ]


def _fresh_asm(dispatcher, args) -> str:
    """Assembly of `dispatcher`'s source compiled now, uncached, with its own options."""
    options = {k: v for k, v in dispatcher.targetoptions.items() if k != "nopython"}  # njit implies it
    assert "fastmath" not in options, "a cpu kernel must not use fastmath"
    fresh = numba.njit(**options)(dispatcher.py_func)
    fresh(*args)
    return "\n".join(fresh.inspect_asm().values())


def _cached_objects(dispatcher) -> list[bytes] | None:
    """The object code numba's cache holds for each of `dispatcher`'s signatures; None if any has none."""
    cache = getattr(dispatcher, "_cache", None)
    if cache is None or not hasattr(cache, "_cache_file"):  # a kernel without cache=True
        return None
    objects = []
    for signature in dispatcher.overloads:
        entry = cache._cache_file.load(cache._index_key(signature, dispatcher.targetctx.codegen()))
        if entry is None:
            return None
        _, kind, payload = entry[0]  # CompileResult._reduce(): the library, serialized as object code first
        assert kind == "object", f"numba cached {dispatcher.py_func.__name__} as {kind}, not object code"
        objects.append(payload[0])
    return objects


def disassemble(objects: list[bytes]) -> str:
    """objdump's disassembly (relocations shown: a call to fmaf is named) of each object, operands written
    with ", " between them as LLVM's assembly writes them."""
    texts = []
    with tempfile.TemporaryDirectory() as where:
        for n, data in enumerate(objects):
            path = Path(where) / f"{n}.o"
            path.write_bytes(data)
            done = subprocess.run(
                ["objdump", "-d", "-r", "--no-show-raw-insn", str(path)], capture_output=True, text=True, check=True
            )
            texts.append(re.sub(r",(?=[%$(\w-])", ", ", done.stdout))
    return "\n".join(texts)


def _machine_code(dispatcher, args) -> str:
    """The code `dispatcher` runs on `args`: its cached objects disassembled, or a fresh compile's assembly."""
    dispatcher(*args)
    objects = _cached_objects(dispatcher)
    return _fresh_asm(dispatcher, args) if objects is None else disassemble(objects)


CALLS = _sample_calls()
VERDICTS = VerdictCache("cpu-no-fma")


@functools.cache
def _machine_code_key() -> dict[str, str]:
    kernel_modules = [Path(module.__file__) for module in (ca, car, ew, lm, mm, nn, pk, rd)]
    return machine_code_key(import_closure(kernel_modules, REPO / "kernels") + [Path(__file__)], {})


def _assert_no_fma(name, dispatcher, args) -> None:
    asm = _machine_code(dispatcher, args)
    found = sorted(set(FMA.findall(asm)))
    assert not found, f"{name}: the assembly holds fused multiply-adds {found}"


@pytest.mark.slow
@pytest.mark.parametrize("name,dispatcher,args", CALLS, ids=[c[0] for c in CALLS])
def test_kernel_has_no_fma(name, dispatcher, args):
    VERDICTS.check(name, _machine_code_key(), lambda: _assert_no_fma(name, dispatcher, args))


# Arithmetic version 2's kernels: their folds are fused on purpose (kernels/cpu_matmul.py).
FUSED_CALLS = [
    ("matmul_packed_fused", mm.matmul_packed_fused, CALLS[1][2]),
    ("matmul_streamed_fused", mm.matmul_streamed_fused, CALLS[2][2]),
    ("matmul_rows_fused", mm.matmul_rows_fused, CALLS[3][2]),
]
# Version 2's attention kernels and per-task functions fold with the same micro-kernel (kernels/cpu_tile.py
# fold_tile_into, the `fused` literal) as matmul_packed_fused, audited above, among the softmax's own
# products (so the strict check of FUSED_CALLS does not apply); compiling them afresh here only to find that
# FMA cost 14-17 s a kernel. Their bits are the reference's in version 2
# (tests/kernels/test_cpu_attention_causal.py) and their version 1 twins are in CALLS (no FMA at all: which
# is why each version has its own dispatchers; one kernel branching to both holds the FMA in its code).
FOLDED_BY_THE_AUDITED_MICRO_KERNEL = {
    "_attention_rows_fused",
    "_panel_v2",
    "_attention_backward_fused",
    "query_panel_v2",
    "softmax_rows_v2",
    "_key_panel_v2",
    "_phases_fused",
    "key_fold_v2",
}
PACKED_FMA = re.compile(r"\bvfmadd\w*ps\s+[^\n]*%[yz]mm")


def _assert_fused(name, dispatcher, args) -> None:
    asm = _machine_code(dispatcher, args)
    if llvm.get_host_cpu_features().get("fma", False):
        assert PACKED_FMA.search(asm), f"{name}: no packed vfmadd on ymm/zmm registers"
        assert not PACKED_MUL.search(asm), f"{name}: a packed vmulps: some fold step is not fused"
    else:  # llvm.fma without the instruction is a call to libm's correctly rounded fmaf
        assert re.search(r"\bfmaf\b", asm), f"{name}: neither FMA instructions nor calls to fmaf"


@pytest.mark.slow
@pytest.mark.parametrize("name,dispatcher,args", FUSED_CALLS, ids=[c[0] for c in FUSED_CALLS])
def test_version_2_kernel_folds_with_fma(name, dispatcher, args):
    VERDICTS.check(f"{name}-fused", _machine_code_key(), lambda: _assert_fused(name, dispatcher, args))


def test_every_kernel_is_checked():
    # A kernel added to a cpu_* module without a sample call here would escape the FMA check.
    checked = {c[0].partition("[")[0] for c in CALLS + FUSED_CALLS} | FOLDED_BY_THE_AUDITED_MICRO_KERNEL
    kernels = {
        name
        for module in (ca, car, ew, lm, mm, nn, pk, rd)
        for name, obj in vars(module).items()
        if isinstance(obj, numba.core.registry.CPUDispatcher)
        and obj.py_func.__module__ == module.__name__
        and obj.targetoptions.get("inline") != "always"  # inlined helpers are checked inside their callers
    }
    assert kernels == checked, f"unchecked: {sorted(kernels - checked)}, stale: {sorted(checked - kernels)}"


@pytest.mark.slow
def test_matmul_inner_loop_is_vectorised():
    VERDICTS.check("matmul_packed-vectorised", _machine_code_key(), _assert_matmul_vectorised)


def _assert_matmul_vectorised() -> None:
    _, dispatcher, args = next(c for c in CALLS if c[0] == "matmul_packed")
    asm = _machine_code(dispatcher, args)
    assert PACKED_MUL.search(asm), "no packed vmulps on ymm/zmm registers in matmul_packed"
    assert PACKED_ADD.search(asm), "no packed vaddps on ymm/zmm registers in matmul_packed"
    assert REGISTER_ADD.search(asm), (
        "no register-to-register vaddps: the micro-kernel's accumulators left the registers"
    )


def test_fma_search_finds_contraction_when_allowed():
    # The failing baseline: with fastmath LLVM does fuse a*b+c here, and the search sees it.
    if not llvm.get_host_cpu_features().get("fma", False):
        pytest.skip("this processor has no FMA instructions")

    def axpy(a, b, c):
        out = np.empty_like(a)
        for i in range(a.shape[0]):
            out[i] = a[i] * b[i] + c[i]
        return out

    x = np.ones(64, F32)
    fused = numba.njit(fastmath=True)(axpy)
    fused(x, x, x)
    assert FMA.search("\n".join(fused.inspect_asm().values()))
    plain = numba.njit(axpy)
    plain(x, x, x)
    assert not FMA.search("\n".join(plain.inspect_asm().values()))
    # The same search over objdump's disassembly of the same code, as the audit reads cached kernels.
    assert FMA.search(disassemble(_objects_of(fused)))
    assert not FMA.search(disassemble(_objects_of(plain)))


def _objects_of(dispatcher) -> list[bytes]:
    """Object code of each of a freshly compiled dispatcher's libraries, emitted by its own target machine."""
    return [
        lib._codegen._tm.emit_object(lib._final_module) for lib in (c.library for c in dispatcher.overloads.values())
    ]
