"""Halving trees over one power-of-two row held in vector registers (LLVM IR intrinsics).

`row_sum_pow2(row, P)` and `row_max_pow2(row, P)` return psum / pmax of
docs/arithmetic.md 2.1 / 2.2 for a contiguous float32 row of exactly P
elements, P a literal power of two in [16, 1024] (no padding). The row is
loaded as P/16 vectors of 16 floats; the levels w >= 16 pair whole vectors
(vector m with vector m + L/2, L the vectors left), and the last four levels
(w = 8, 4, 2, 1) pair the halves of the last vector by shuffles. Those are
exactly the pairs (i, i + w) of the halving tree, in the same order, each a
plain fadd (or the max2 select: NaN if either is NaN, b if b > a, else a),
no fast-math flags. Written in IR because numba cannot keep a scratch buffer
in registers: through memory each level costs a store and a reload.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

LANES = 16
MAX_ROW = 1024  # at most 64 vectors live: LLVM spills the widest levels, which is fine


def _combine(builder, kind: str, a, b):
    """a + b, or max2(a, b) = NaN if either is NaN; b if b > a; a otherwise (lane by lane)."""
    if kind == "sum":
        return builder.fadd(a, b)
    take_b = builder.or_(builder.fcmp_ordered(">", b, a), builder.fcmp_unordered("uno", b, b))
    return builder.select(take_b, b, a)


def _row_tree(kind: str):
    """Build the intrinsic for `kind` ("sum" or "max")."""

    def typer(typingctx, row, p):
        if not (isinstance(row, types.Array) and row.ndim == 1 and row.dtype == types.float32 and row.layout == "C"):
            return None  # a contiguous float32 row only
        if not isinstance(p, types.IntegerLiteral):
            return None
        size = p.literal_value
        if size < LANES or size > MAX_ROW or size & (size - 1):
            return None
        sig = types.float32(row, p)

        def codegen(context, builder, signature, args):
            ary = context.make_array(signature.args[0])(context, builder, args[0])
            vec = ir.VectorType(ir.FloatType(), LANES)
            base = builder.bitcast(ary.data, vec.as_pointer())  # layout C: unit stride
            vals = [
                builder.load(builder.gep(base, [ir.Constant(ir.IntType(64), m)]), align=4) for m in range(size // LANES)
            ]
            while len(vals) > 1:  # levels w >= 16: vector m with vector m + L/2
                half = len(vals) // 2
                vals = [_combine(builder, kind, vals[m], vals[m + half]) for m in range(half)]
            v = vals[0]
            width = LANES
            while width > 1:  # levels w = 8, 4, 2, 1 inside the last vector
                half = width // 2
                lo = builder.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), half), list(range(half))))
                hi = builder.shuffle_vector(
                    v, v, ir.Constant(ir.VectorType(ir.IntType(32), half), list(range(half, width)))
                )
                v = _combine(builder, kind, lo, hi)
                width = half
            return builder.extract_element(v, ir.Constant(ir.IntType(32), 0))

        return sig, codegen

    typer.__name__ = f"row_{kind}_pow2"
    return intrinsic(typer)


row_sum_pow2 = _row_tree("sum")
row_max_pow2 = _row_tree("max")


COL_LEAF = 16  # rows folded in registers by col_tree16


@intrinsic
def col_tree16(typingctx, x, a, g, c0, pad, dst, d0):
    """dst[d0:d0+16] = the halving tree over m < 16 of x[a + m*g, c0:c0+16] (16 columns at once).

    Rows a + m*g >= R are padding and read from pad (16 x -0.0), the
    identity of +, so the tree has the same bits as the one over the rows
    that exist. Level w pairs row m with row m + w (m < w), w = 8, 4, 2, 1,
    all in registers. Preconditions (the caller's): x (R, C) and dst
    C-contiguous float32, a < g, c0 + 16 <= C, d0 + 16 <= len(dst),
    len(pad) >= 16.
    """
    if not all(isinstance(t, types.Array) and t.dtype == types.float32 and t.layout == "C" for t in (x, pad, dst)):
        return None
    if x.ndim != 2 or pad.ndim != 1 or dst.ndim != 1:
        return None
    sig = types.void(x, types.intp, types.intp, types.intp, pad, dst, types.intp)

    def codegen(context, builder, signature, args):
        xv, av, gv, cv, padv, dstv, dv = args
        av, gv, cv, dv = (
            context.cast(builder, v, t, types.intp)
            for v, t in zip((av, gv, cv, dv), signature.args[1:4] + (signature.args[6],))
        )
        xa = context.make_array(signature.args[0])(context, builder, xv)
        pa = context.make_array(signature.args[4])(context, builder, padv)
        da = context.make_array(signature.args[5])(context, builder, dstv)
        rows, cols = cgutils.unpack_tuple(builder, xa.shape, 2)
        vec = ir.VectorType(ir.FloatType(), LANES)
        pad_ptr = builder.bitcast(pa.data, vec.as_pointer())
        intp = context.get_value_type(types.intp)
        vals = []
        for m in range(COL_LEAF):
            r = builder.add(av, builder.mul(gv, ir.Constant(intp, m)))
            inside = builder.icmp_signed("<", r, rows)
            safe_r = builder.select(inside, r, ir.Constant(intp, 0))  # never form an address past the end
            elem = builder.gep(xa.data, [builder.add(builder.mul(safe_r, cols), cv)])
            ptr = builder.select(inside, builder.bitcast(elem, vec.as_pointer()), pad_ptr)
            vals.append(builder.load(ptr, align=4))
        while len(vals) > 1:  # level w = len/2: row m with row m + w
            half = len(vals) // 2
            vals = [builder.fadd(vals[m], vals[m + half]) for m in range(half)]
        out = builder.bitcast(builder.gep(da.data, [dv]), vec.as_pointer())
        builder.store(vals[0], out, align=4)
        return context.get_dummy_value()

    return sig, codegen
