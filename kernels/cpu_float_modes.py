"""The calling thread's floating-point control state, which would change the kernels' bits: x86's MXCSR.

docs/arithmetic.md section 1 rounds to nearest, ties to even, and keeps subnormals. The SSE/AVX units
read MXCSR on every instruction, and a library may set it for its thread at any time:
`torch.set_flush_denormal(True)` sets flush-to-zero (bit 15) and denormals-are-zero (bit 6) on the
thread that calls it, C's fesetround sets the rounding control (bits 13-14), feenableexcept unmasks
exceptions (bits 7-12: an invalid operation, which a NaN in a state makes, would then kill the
process). The numba kernels and numpy on that thread would then flush subnormals or round otherwise,
the other threads not, so the bits would depend on which thread computed which element.
`nonstandard_modes()` reads the register (numba's `llvm.x86.sse.stmxcsr`) and names what differs
from the default control word 0x1F80 (all exceptions masked, round to nearest, no flushing): the lab
mode refuses to compute while anything does (p2paudit.lab.mode). `standard_modes()` writes the
default control bits back for the calling thread (`ldmxcsr`, the status flags kept): the engine's
step does, since a lab script replayed earlier on the same worker thread may have changed them. On a
processor that is not x86-64 neither does anything (None).
"""

from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

FLUSH_TO_ZERO = 1 << 15
DENORMALS_ARE_ZERO = 1 << 6
ROUNDING = 3 << 13  # 00 nearest, 01 toward -inf, 10 toward +inf, 11 toward zero
EXCEPTION_MASKS = 0x3F << 7  # invalid, denormal, divide-by-zero, overflow, underflow, precision
STATUS_FLAGS = 0x3F  # sticky: set by the arithmetic itself, never a mode
STANDARD_CONTROL = EXCEPTION_MASKS  # 0x1F80: every exception masked, round to nearest, no flushing
_ROUNDINGS = {1 << 13: "rounding toward -inf", 2 << 13: "rounding toward +inf", 3 << 13: "rounding toward zero"}
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
    """The calling thread's whole MXCSR (control bits and status flags)."""
    return _stmxcsr()


@njit(cache=True)
def _control():
    """The calling thread's MXCSR control bits (the status flags cleared): a non-negative int."""
    return _stmxcsr() & ~STATUS_FLAGS & 0xFFFF


@njit(cache=True)
def _write_control(control):
    bits = _stmxcsr()
    _ldmxcsr((bits & STATUS_FLAGS) | control)


def describe(bits: int) -> list[str]:
    """What an MXCSR value's control bits hold that the standard control word does not."""
    found = []
    if bits & FLUSH_TO_ZERO:
        found.append("flush-to-zero")
    if bits & DENORMALS_ARE_ZERO:
        found.append("denormals-are-zero")
    if bits & ROUNDING:
        found.append(_ROUNDINGS[bits & ROUNDING])
    if bits & EXCEPTION_MASKS != EXCEPTION_MASKS:
        found.append("unmasked floating-point exceptions")
    return found


def nonstandard_modes() -> list[str] | None:
    """What the calling thread's MXCSR holds beyond the standard control word (empty: nothing); None on a
    processor that is not x86-64."""
    if not X86:
        return None
    bits = _control()  # the lab mode asks before every op: the common answer without numpy's conversions
    return [] if bits == STANDARD_CONTROL else describe(bits)


def standard_modes() -> list[str] | None:
    """Write the standard control bits for the calling thread (status flags kept); what was not standard
    before (None where the processor is not x86-64)."""
    before = nonstandard_modes()
    if before:
        _write_control(np.int32(STANDARD_CONTROL))
    return before
