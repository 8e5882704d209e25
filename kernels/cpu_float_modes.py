"""The calling thread's floating-point modes that would change the kernels' bits: flush-to-zero and
denormals-are-zero (x86's MXCSR bits 15 and 6).

docs/arithmetic.md section 1 keeps subnormals. The SSE/AVX units read MXCSR on every instruction and
a library may set it for its thread at any time (`torch.set_flush_denormal(True)` does, on the thread
that calls it): the numba kernels and numpy would then flush subnormal results and inputs to zero on
that thread only, so the bits would depend on which thread computed which element. `flush_modes()`
reads the register (numba's `llvm.x86.sse.stmxcsr`): the lab mode refuses to compute while either is
on (p2paudit.lab.mode). `keep_subnormals()` turns both off for the calling thread (`ldmxcsr`): the
engine's step does, since a lab script replayed earlier on the same worker thread may have left them
on. On a processor that is not x86-64 neither does anything (None).
"""

from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

FLUSH_TO_ZERO = 1 << 15
DENORMALS_ARE_ZERO = 1 << 6
X86 = platform.machine().lower() in ("x86_64", "amd64")


@intrinsic
def _stmxcsr(typingctx):
    """The calling thread's MXCSR as an int32."""

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        slot = builder.alloca(i32)
        fn = builder.module.declare_intrinsic(
            "llvm.x86.sse.stmxcsr", fnty=ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()])
        )
        builder.call(fn, [builder.bitcast(slot, ir.IntType(8).as_pointer())])
        return builder.load(slot)

    return types.int32(), codegen


@intrinsic
def _ldmxcsr(typingctx, bits):
    """Load the int32 `bits` into the calling thread's MXCSR."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        slot = builder.alloca(i32)
        builder.store(context.cast(builder, args[0], signature.args[0], types.int32), slot)
        fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer()])
        fn = builder.module.declare_intrinsic("llvm.x86.sse.ldmxcsr", fnty=fnty)
        builder.call(fn, [builder.bitcast(slot, ir.IntType(8).as_pointer())])
        return context.get_dummy_value()

    return types.void(bits), codegen


@njit(cache=True)
def _mxcsr():
    return _stmxcsr()


@njit(cache=True)
def _clear_mxcsr(mask):
    bits = _stmxcsr()
    if bits & mask:
        _ldmxcsr(bits & ~mask)


def flush_modes() -> tuple[bool, bool] | None:
    """(flush-to-zero, denormals-are-zero) of the calling thread; None on a processor that is not x86-64."""
    if not X86:
        return None
    bits = int(np.uint32(np.int32(_mxcsr())))
    return bool(bits & FLUSH_TO_ZERO), bool(bits & DENORMALS_ARE_ZERO)


def keep_subnormals() -> tuple[bool, bool] | None:
    """Turn flush-to-zero and denormals-are-zero off for the calling thread; what they were (None where the
    processor is not x86-64)."""
    before = flush_modes()
    if before is not None and any(before):
        _clear_mxcsr(np.int32(FLUSH_TO_ZERO | DENORMALS_ARE_ZERO))
    return before
