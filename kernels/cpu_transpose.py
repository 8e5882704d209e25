"""A 16-value block of a transposing pack, in registers, and a panel row's copy (kernels/cpu_pack.py), in LLVM IR.

`transpose_12(src, r0, k0, panel)` and `transpose_32(...)` copy
src[r0 + r, k0 + kk] to panel[k0 + kk, r] for kk < 16 and r < 12 (or 32):
one block of an operand's rows turned k-major, the layout the matmul's
micro-kernel reads. They copy values and change none.

The scalar copy (one load and one store an element, four-dimensional
indices) took about 0.6 ns an element; this one loads each row's 16 values of
k as one vector (one cache line), transposes 16 rows at a time with four
rounds of two-source shuffles (vpermt2ps with AVX-512: 64 for 256 values),
and stores each k's row values as one vector, the 12-value rows of an A panel
with a masked store. Without AVX-512 LLVM lowers the same IR to narrower
shuffles and stores: the values copied are the same.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from kernels.cpu_tile import LANES, _element_ptr, _vector_ptr

BLOCK_K = LANES  # values of k per block: one 64-byte line of each source row


def _swap_masks(h: int) -> tuple[list[int], list[int]]:
    """Shuffle masks of one round: rows i and i + h exchange their off-diagonal blocks of h lanes.

    After the rounds h = 8, 4, 2, 1 (each swapping, inside every 2h x 2h
    block, the upper right h x h block with the lower left), 16 rows are
    transposed. Mask values 0-15 pick row i's lanes, 16-31 row i + h's.
    """
    low = [lane if lane & h == 0 else LANES + lane - h for lane in range(LANES)]
    high = [lane + h if lane & h == 0 else LANES + lane for lane in range(LANES)]
    return low, high


def _transpose16(builder: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """The 16 columns of 16 <16 x float> rows, as 16 vectors (column k's lane r is rows[r][k])."""
    rows = list(rows)
    i32 = ir.IntType(32)
    for h in (8, 4, 2, 1):
        low, high = (ir.Constant(ir.VectorType(i32, LANES), m) for m in _swap_masks(h))
        for i in range(LANES):
            if i & h == 0:
                a, b = rows[i], rows[i + h]
                rows[i] = builder.shuffle_vector(a, b, low)
                rows[i + h] = builder.shuffle_vector(a, b, high)
    return rows


def make_transpose(width: int) -> Any:
    """The intrinsic transposing a width x 16 block (width 12 or 32; see the module docstring)."""
    groups = -(-width // LANES)  # 16-row groups transposed apart

    @intrinsic
    def transpose(typingctx, src, r0, k0, panel):
        """src[r0 + r, k0 + kk] -> panel[k0 + kk, r] for r < width, kk < 16.

        Preconditions (unchecked, the caller's loops guarantee them): src (X,
        K) and panel (K, width) are 2-d float32 arrays with unit column
        stride, r0 + width <= X, k0 + 16 <= K.
        """
        for arr in (src, panel):
            if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.dtype == types.float32):
                return None
        sig = types.void(src, types.intp, types.intp, panel)

        def codegen(context, builder, signature, args):
            s_arr, rr0, rk0, p_arr = args
            s_ty, _, _, p_ty = signature.args
            intp = context.get_value_type(types.intp)
            rr0, rk0 = (context.cast(builder, v, t, types.intp) for v, t in zip((rr0, rk0), signature.args[1:3]))
            vec = ir.VectorType(ir.FloatType(), LANES)
            zero = ir.Constant(vec, [0.0] * LANES)
            mask_ty = ir.VectorType(ir.IntType(1), LANES)
            fn_ty = ir.FunctionType(ir.VoidType(), [vec, vec.as_pointer(), ir.IntType(32), mask_ty])
            masked_store = cgutils.get_or_insert_function(builder.module, fn_ty, "llvm.masked.store.v16f32.p0v16f32")
            for g in range(groups):
                rows = []
                for r in range(LANES):
                    row = g * LANES + r
                    if row < width:
                        at = _element_ptr(context, builder, s_ty, s_arr, builder.add(rr0, ir.Constant(intp, row)), rk0)
                        rows.append(builder.load(_vector_ptr(builder, at, vec), align=4))
                    else:
                        rows.append(zero)  # lanes past the panel: computed, never stored
                cols = _transpose16(builder, rows)
                lanes = min(LANES, width - g * LANES)
                mask = ir.Constant(mask_ty, [1] * lanes + [0] * (LANES - lanes))
                for kk in range(LANES):
                    at = _element_ptr(
                        context,
                        builder,
                        p_ty,
                        p_arr,
                        builder.add(rk0, ir.Constant(intp, kk)),
                        ir.Constant(intp, g * LANES),
                    )
                    if lanes == LANES:
                        builder.store(cols[kk], _vector_ptr(builder, at, vec), align=4)
                    else:
                        builder.call(
                            masked_store,
                            [cols[kk], _vector_ptr(builder, at, vec), ir.Constant(ir.IntType(32), 4), mask],
                        )
            return context.get_dummy_value()

        return sig, codegen

    return transpose


def make_row_copy(width: int) -> Any:
    """The intrinsic copying src[row, col : col + width] to dst[drow, 0 : width] as vectors (width 12 or 32).

    A k-major pack's row of one panel: one or two <16 x float> loads and
    stores (the last group masked to the panel's width), where numba's loop
    copied about one float a cycle.
    """
    groups = -(-width // LANES)

    @intrinsic
    def copy(typingctx, src, row, col, dst, drow):
        """Preconditions (unchecked): src and dst 2-d float32 with unit column stride, col + width <= src's
        columns, width <= dst's columns, row and drow in range."""
        for arr in (src, dst):
            if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.dtype == types.float32):
                return None
        sig = types.void(src, types.intp, types.intp, dst, types.intp)

        def codegen(context, builder, signature, args):
            s_arr, rrow, rcol, d_arr, rdrow = args
            s_ty, _, _, d_ty, _ = signature.args
            intp = context.get_value_type(types.intp)
            rrow, rcol, rdrow = (
                context.cast(builder, v, t, types.intp)
                for v, t in zip((rrow, rcol, rdrow), (signature.args[1], signature.args[2], signature.args[4]))
            )
            vec = ir.VectorType(ir.FloatType(), LANES)
            mask_ty = ir.VectorType(ir.IntType(1), LANES)
            i32 = ir.IntType(32)
            load_ty = ir.FunctionType(vec, [vec.as_pointer(), i32, mask_ty, vec])
            masked_load = cgutils.get_or_insert_function(builder.module, load_ty, "llvm.masked.load.v16f32.p0v16f32")
            store_ty = ir.FunctionType(ir.VoidType(), [vec, vec.as_pointer(), i32, mask_ty])
            masked_store = cgutils.get_or_insert_function(builder.module, store_ty, "llvm.masked.store.v16f32.p0v16f32")
            for g in range(groups):
                offset = ir.Constant(intp, g * LANES)
                src_at = _vector_ptr(
                    builder, _element_ptr(context, builder, s_ty, s_arr, rrow, builder.add(rcol, offset)), vec
                )
                dst_at = _vector_ptr(builder, _element_ptr(context, builder, d_ty, d_arr, rdrow, offset), vec)
                lanes = min(LANES, width - g * LANES)
                if lanes == LANES:
                    builder.store(builder.load(src_at, align=4), dst_at, align=4)
                else:
                    mask = ir.Constant(mask_ty, [1] * lanes + [0] * (LANES - lanes))
                    values = builder.call(
                        masked_load, [src_at, ir.Constant(i32, 4), mask, ir.Constant(vec, [0.0] * LANES)]
                    )
                    builder.call(masked_store, [values, dst_at, ir.Constant(i32, 4), mask])
            return context.get_dummy_value()

        return sig, codegen

    return copy


transpose_12 = make_transpose(12)
transpose_32 = make_transpose(32)
copy_12 = make_row_copy(12)
copy_32 = make_row_copy(32)
