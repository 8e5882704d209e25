"""The register-blocked micro-kernel of the `cpu` matmul, written in LLVM IR.

`fold_tile(apanel, bpanel, acc, i0, j0, k0, kw, fused)` adds, for kk = 0, 1,
..., kw-1 in this order, `apanel[k0 + kk, i] * bpanel[k0 + kk, j]` to
`acc[i0 + i, j0 + j]` for i < TILE_ROWS and j < TILE_COLS: one register tile
of C folded over kw consecutive k from packed operands (kernels/cpu_matmul.py
packs A k-major in TILE_ROWS-row panels and B in TILE_COLS-column panels, so
both operands of one k are contiguous). `fused` is a compile-time constant (a
literal True or False at the call site): False is arithmetic version 1, True
version 2. `fold_tile_into` is the same fold with the tile started at +0.0
or from another array's tile, and ended in a third (a product's first k
block starts at +0.0, its last ends in C itself).

numba offers no way to hold a block of vector registers across a loop (a
small array lives in memory that LLVM cannot prove unaliased), so this numba
intrinsic emits the loop itself: the tile's TILE_ROWS * TILE_VECS
accumulators are <16 x float> values in allocas that LLVM promotes to
registers, loaded once before the k loop and stored once after it. With
AVX-512 (32 zmm) the 12 x 32 tile holds 24 accumulators, 2 panel vectors and
a broadcast: per k, 2 vector loads of B and 12 broadcasts of A feed 24 FMAs
(or 24 multiplies and 24 adds), and a prefetch of A's row PREFETCH_ROWS
ahead: A streams from L2 (the B panel stays in L1), and without the hint one
thread's fold of real operands ran at 164-177 GFLOP/s against 173-189 with
it (distances 32 to 64 alike; the micro-kernel's rate from L1 is 190). Version 1: each step is a plain `fmul` then a
plain `fadd` with no fast-math flags, so LLVM may neither fuse them into an
FMA nor reorder the fold: every accumulator sees k in increasing order, one
rounded product and one rounded sum per k, as docs/arithmetic.md 2.3 says.
Version 2: each step is one `llvm.fma` (never `llvm.fmuladd`, which LLVM may
split into two roundings), one rounding per k in the same order: vfmadd231ps
with FMA3 or AVX-512, and on a processor without FMA a call to libm's
correctly rounded fmaf per lane (slow, same bits). On a CPU without AVX-512
LLVM splits each 16-lane vector into narrower ones; the lanes and so the bits
are the same. The tile's shape changes no bit: each output's fold is the same
whatever tile it falls in.
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 16  # floats per <16 x float> vector
TILE_ROWS = 12  # rows of the register tile (literal: the kernel is unrolled over them)
TILE_VECS = 2  # 16-float vectors per tile row
TILE_COLS = TILE_VECS * LANES  # 32
PREFETCH_ROWS = 48  # the k loop asks for A's row k + 48 into L1 (2.3 KiB ahead; past the slice: the next panel's)


def _element_ptr(context, builder, arr_type, arr, row, col):
    """Pointer to arr[row, col] of a 2-d numba array (any strides)."""
    ary = context.make_array(arr_type)(context, builder, arr)
    shape = cgutils.unpack_tuple(builder, ary.shape, 2)
    strides = cgutils.unpack_tuple(builder, ary.strides, 2)
    return cgutils.get_item_pointer2(context, builder, ary.data, shape, strides, arr_type.layout, [row, col])


def _vector_ptr(builder, elem_ptr, vec):
    """Reinterpret a float* as a <16 x float>* (loads use align 4: rows need no alignment)."""
    return builder.bitcast(elem_ptr, vec.as_pointer())


def make_fold_tile(rows: int, vecs: int) -> Any:
    """The numba intrinsic folding one rows x (16 * vecs) tile; see the module docstring (rows, vecs >= 1)."""
    n_acc = rows * vecs

    @intrinsic
    def fold(typingctx, apanel, bpanel, src, si, sj, dst, di, dj, k0, kw, fused, from_zero):
        """Fold kw steps of k into one tile: from src's tile at (si, sj), or from +0.0, into dst's at (di, dj).

        The accumulators start as src[si + i, sj + j] (from_zero False) or
        +0.0 (from_zero True: src is not read), take the kw steps of k in the
        registers and end in dst[di + i, dj + j]; dst may be src. Starting
        from +0.0 is the same as loading a tile of +0.0: no bit differs.
        Preconditions (unchecked, the caller's loops guarantee them): apanel
        (K, >= rows), bpanel (K, >= 16 * vecs), src and dst are 2-d float32
        arrays with unit column stride; each tile lies within its array,
        k0 >= 0 and k0 + kw <= K.
        """
        for arr in (apanel, bpanel, src, dst):
            if not (isinstance(arr, types.Array) and arr.ndim == 2 and arr.dtype == types.float32):
                return None
        if not (isinstance(fused, types.BooleanLiteral) and isinstance(from_zero, types.BooleanLiteral)):
            return None  # which fold is compiled must be known when it is compiled
        one_rounding, zero_start = fused.literal_value, from_zero.literal_value
        index = types.intp
        sig = types.void(apanel, bpanel, src, index, index, dst, index, index, index, index, fused, from_zero)

        def codegen(context, builder, signature, args):
            a_arr, b_arr, s_arr, rsi, rsj, d_arr, rdi, rdj, rk0, rkw, _, _ = args
            a_ty, b_ty, s_ty, _, _, d_ty = signature.args[:6]
            intp = context.get_value_type(types.intp)
            rsi, rsj, rdi, rdj, rk0, rkw = (
                context.cast(builder, v, t, types.intp)
                for v, t in zip((rsi, rsj, rdi, rdj, rk0, rkw), (signature.args[i] for i in (3, 4, 6, 7, 8, 9)))
            )
            f32 = ir.FloatType()
            vec = ir.VectorType(f32, LANES)
            i32 = ir.IntType(32)
            # One alloca per accumulator, in the entry block: mem2reg turns each into a register.
            slots = [cgutils.alloca_once(builder, vec, name=f"tile_acc{n}") for n in range(n_acc)]

            def tile_ptr(arr_ty, arr, r0, c0, i, v):
                col = builder.add(c0, ir.Constant(intp, v * LANES))
                elem = _element_ptr(context, builder, arr_ty, arr, builder.add(r0, ir.Constant(intp, i)), col)
                return _vector_ptr(builder, elem, vec)

            for i in range(rows):  # load the tile once (or start it at +0.0)
                for v in range(vecs):
                    if zero_start:
                        start = ir.Constant(vec, [0.0] * LANES)
                    else:
                        start = builder.load(tile_ptr(s_ty, s_arr, rsi, rsj, i, v), align=4)
                    builder.store(start, slots[i * vecs + v])

            # llvm.fma on <16 x float> (llvmlite's builder.fma takes scalars only): exact, one rounding per lane.
            fn_ty = ir.FunctionType(vec, [vec] * 3)
            vec_fma = cgutils.get_or_insert_function(builder.module, fn_ty, "llvm.fma.v16f32")
            zeros = ir.Constant(ir.VectorType(i32, LANES), [0] * LANES)
            undef = ir.Constant(vec, ir.Undefined)
            # llvm.prefetch(ptr, read, high locality, data): a hint, never a fault (past an array's end too)
            i8p = ir.IntType(8).as_pointer()
            prefetch_ty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            prefetch = cgutils.get_or_insert_function(builder.module, prefetch_ty, "llvm.prefetch.p0i8")
            hint = [ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
            with cgutils.for_range(builder, rkw) as loop:  # kk = 0, 1, ..., kw - 1
                krow = builder.add(rk0, loop.index)
                ahead = builder.add(krow, ir.Constant(intp, PREFETCH_ROWS))
                a_ahead = _element_ptr(context, builder, a_ty, a_arr, ahead, ir.Constant(intp, 0))
                builder.call(prefetch, [builder.bitcast(a_ahead, i8p), *hint])
                bvecs = []
                for v in range(vecs):
                    elem = _element_ptr(context, builder, b_ty, b_arr, krow, ir.Constant(intp, v * LANES))
                    bvecs.append(builder.load(_vector_ptr(builder, elem, vec), align=4))
                for i in range(rows):
                    a_elem = _element_ptr(context, builder, a_ty, a_arr, krow, ir.Constant(intp, i))
                    a_one = builder.insert_element(undef, builder.load(a_elem, align=4), ir.Constant(i32, 0))
                    a_all = builder.shuffle_vector(a_one, undef, zeros)  # broadcast apanel[k, i]
                    for v in range(vecs):
                        slot = slots[i * vecs + v]
                        if one_rounding:  # version 2: acc = fma(a, b, acc)
                            builder.store(builder.call(vec_fma, [a_all, bvecs[v], builder.load(slot)]), slot)
                        else:  # version 1: acc = acc + (a * b)
                            product = builder.fmul(a_all, bvecs[v])  # rounded once; no fast-math flags
                            builder.store(builder.fadd(builder.load(slot), product), slot)  # rounded once

            for i in range(rows):  # store the tile once
                for v in range(vecs):
                    builder.store(builder.load(slots[i * vecs + v]), tile_ptr(d_ty, d_arr, rdi, rdj, i, v), align=4)
            return context.get_dummy_value()

        return sig, codegen

    return fold


fold_tile_into = make_fold_tile(TILE_ROWS, TILE_VECS)


@njit(inline="always")
def fold_tile(apanel, bpanel, acc, i0, j0, k0, kw, fused):
    """fold_tile_into with the tile of acc at (i0, j0) both where the accumulators start and where they end."""
    fold_tile_into(apanel, bpanel, acc, i0, j0, acc, i0, j0, k0, kw, fused, False)
