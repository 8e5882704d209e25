"""Elementwise kernels of the `cpu` backend: a sum, exp, log, SiLU and its backward, AdamW (new arrays or in place),
the rows of a one-hot gradient, and + - * / of broadcast or strided operands (binary_rows, for the lab mode).

All take flat (1-d, C-contiguous) float32 arrays (binary_rows with its operands' strides beside them);
kernels/cpu.py and kernels/cpu_lab.py reshape.
Each output element depends on its own inputs only, so prange splits the
index range between threads and LLVM vectorises each chunk; the bits cannot
depend on either split.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.extending import overload

from kernels.cpu_scalar import ONE, exp_f32, log_f32


@njit(parallel=True, cache=True)
def add_flat(a, b, out):
    """out[i] = a[i] + b[i], rounded once, for 1-d float32 arrays of one length (out a new array)."""
    for i in prange(a.shape[0]):
        out[i] = a[i] + b[i]


ADD, SUBTRACT, MULTIPLY, DIVIDE, NEGATE = 0, 1, 2, 3, 4  # binary_rows' operations (NEGATE: -x, y unread)


# binary_rows' operations, each a op b rounded once to float32; NEGATE is -a, its sign bit flipped (NaN's too,
# as numpy's negative), b not used. The one statement of each: _combine runs them in Python, its overload
# compiles the literal op's alone.
_OPERATIONS = {
    NEGATE: lambda a, b: -a,
    ADD: lambda a, b: a + b,
    SUBTRACT: lambda a, b: a - b,
    MULTIPLY: lambda a, b: a * b,
    DIVIDE: lambda a, b: a / b,
}
_COMPILED_OPERATIONS = {op: njit(inline="always")(f) for op, f in _OPERATIONS.items()}


def _combine(op, a, b):
    """a op b (_OPERATIONS). Compiled, the overload below generates the code of a literal op alone (numba
    types a constant argument as a literal), not every branch in every inlined copy."""
    return _OPERATIONS[op](a, b)


@overload(_combine, inline="always", prefer_literal=True)
def _combine_literal(op, a, b):
    """_combine's code for the literal op."""
    f = _COMPILED_OPERATIONS.get(getattr(op, "literal_value", None))
    return None if f is None else lambda op, a, b: f(a, b)


# the strides of a row's columns: (1, 1), (1, 0), (0, 1), (2, 1) (RoPE's x[..., ::2] times a table), (0, 0) (a
# broadcast value, as a mean's backward divides), any
CONTIGUOUS, X_RUN_Y_ONE, X_ONE_Y_RUN, X_PAIRS_Y_RUN, X_ONE_Y_ONE, STRIDED = 0, 1, 2, 3, 4, 5


def _row(op, case, x, xo, sx, y, yo, sy, dst):
    """dst[m] = x[xo + m * sx] op y[yo + m * sy] for m < len(dst). Compiled, the overload below generates
    the loop of a literal `case` alone, which names unit and zero strides (and x's stride 2: RoPE's
    interleaved halves), walked as plain slices and scalars so that LLVM vectorises them: the same
    elements as this loop."""
    for m in range(dst.shape[0]):
        dst[m] = _combine(op, x[xo + m * sx], y[yo + m * sy])


@overload(_row, inline="always", prefer_literal=True)
def _row_literal(op, case, x, xo, sx, y, yo, sy, dst):
    """_row's loop for the literal case."""
    which = getattr(case, "literal_value", None)
    if which == CONTIGUOUS:

        def contiguous(op, case, x, xo, sx, y, yo, sy, dst):
            n = dst.shape[0]
            xs, ys = x[xo : xo + n], y[yo : yo + n]
            for m in range(n):
                dst[m] = _combine(op, xs[m], ys[m])

        return contiguous
    if which == X_RUN_Y_ONE:

        def x_run_y_one(op, case, x, xo, sx, y, yo, sy, dst):
            n = dst.shape[0]
            xs, b = x[xo : xo + n], y[yo]
            for m in range(n):
                dst[m] = _combine(op, xs[m], b)

        return x_run_y_one
    if which == X_ONE_Y_RUN:

        def x_one_y_run(op, case, x, xo, sx, y, yo, sy, dst):
            n = dst.shape[0]
            a, ys = x[xo], y[yo : yo + n]
            for m in range(n):
                dst[m] = _combine(op, a, ys[m])

        return x_one_y_run
    if which == X_PAIRS_Y_RUN:  # a literal stride 2: LLVM loads two vectors and keeps every other lane

        def x_pairs_y_run(op, case, x, xo, sx, y, yo, sy, dst):
            n = dst.shape[0]
            xs, ys = x[xo : xo + 2 * n], y[yo : yo + n]
            for m in range(n):
                dst[m] = _combine(op, xs[2 * m], ys[m])

        return x_pairs_y_run
    if which == X_ONE_Y_ONE:  # one value for the whole row, written n times

        def x_one_y_one(op, case, x, xo, sx, y, yo, sy, dst):
            c = _combine(op, x[xo], y[yo])
            for m in range(dst.shape[0]):
                dst[m] = c

        return x_one_y_one
    if which == STRIDED:

        def strided(op, case, x, xo, sx, y, yo, sy, dst):
            for m in range(dst.shape[0]):
                dst[m] = _combine(op, x[xo + m * sx], y[yo + m * sy])

        return strided
    return None


@njit(inline="always")
def _rows(op, case, x, y, out, g, r, end, c0, c1):
    """Rows r .. end-1 of out (its first three axes flattened), columns c0 .. c1-1, of one stride case."""
    n1, n2, n3 = g[1], g[2], g[3]
    x0, x1, x2, x3, y0, y1, y2, y3 = g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11]
    i = r // (n1 * n2)  # row r is (i, j, k); the next rows count on from it (no division per row)
    j = (r - i * n1 * n2) // n2
    k = r - (i * n1 + j) * n2
    while r < end:
        xo = i * x0 + j * x1 + k * x2 + c0 * x3
        yo = i * y0 + j * y1 + k * y2 + c0 * y3
        _row(op, case, x, xo, x3, y, yo, y3, out[r * n3 + c0 : r * n3 + c1])
        r += 1
        k += 1
        if k == n2:
            k = 0
            j += 1
            if j == n1:
                j = 0
                i += 1


@njit(inline="always")
def _task(op, x, y, out, g, task):
    """One task of binary_rows: a run of g[12] rows, g[13] columns; the stride case chosen once for it."""
    n3, rpt, cpt = g[3], g[12], g[13]
    rows = g[0] * g[1] * g[2]
    col_blocks = (n3 + cpt - 1) // cpt
    rb = task // col_blocks
    c0 = (task - rb * col_blocks) * cpt
    c1 = min(n3, c0 + cpt)
    r, end = rb * rpt, min(rows, rb * rpt + rpt)
    if g[7] == 1 and g[11] == 1:
        _rows(op, CONTIGUOUS, x, y, out, g, r, end, c0, c1)
    elif g[7] == 1 and g[11] == 0:
        _rows(op, X_RUN_Y_ONE, x, y, out, g, r, end, c0, c1)
    elif g[7] == 0 and g[11] == 1:
        _rows(op, X_ONE_Y_RUN, x, y, out, g, r, end, c0, c1)
    elif g[7] == 2 and g[11] == 1:
        _rows(op, X_PAIRS_Y_RUN, x, y, out, g, r, end, c0, c1)
    elif g[7] == 0 and g[11] == 0:
        _rows(op, X_ONE_Y_ONE, x, y, out, g, r, end, c0, c1)
    else:
        _rows(op, STRIDED, x, y, out, g, r, end, c0, c1)


@njit(parallel=True, cache=True)
def binary_rows(op, x, y, out, g):
    """out = x op y (ADD, SUBTRACT, MULTIPLY, DIVIDE; NEGATE: -x), rounded once per element, on every thread.

    out is a flat C-contiguous float32 array of the result, seen as (g[0], g[1], g[2], g[3]); x and y are
    flat float32 arrays starting at each operand's first element, element (i, j, k, m) of an operand at
    offset i * s0 + j * s1 + k * s2 + m * s3 (x's strides g[4:8], y's g[8:12], in elements, >= 0: a
    broadcast axis has stride 0). A task is g[12] consecutive rows (i, j, k) and g[13] consecutive columns m.
    Each element is its own operation: no split changes a bit."""
    tasks = ((g[0] * g[1] * g[2] + g[12] - 1) // g[12]) * ((g[3] + g[13] - 1) // g[13])
    for task in prange(tasks):
        if op == ADD:
            _task(ADD, x, y, out, g, task)
        elif op == SUBTRACT:
            _task(SUBTRACT, x, y, out, g, task)
        elif op == MULTIPLY:
            _task(MULTIPLY, x, y, out, g, task)
        elif op == DIVIDE:
            _task(DIVIDE, x, y, out, g, task)
        else:
            _task(NEGATE, x, y, out, g, task)


@njit(parallel=True, cache=True)
def scale_flat(x, c, out):
    """out[i] = x[i] * c, rounded once, for a 1-d float32 array x and a float32 c (out may be x)."""
    for i in prange(x.shape[0]):
        out[i] = x[i] * c


@njit(parallel=True, cache=True)
def one_hot_rows(cols, value, out):
    """out[r, :] = +0.0, then out[r, cols[r]] = value where cols[r] >= 0: out (R, C) float32, cols (R,) int64
    below C, value float32; rows on every thread (no arithmetic: a fresh array's pages filled in parallel)."""
    zero = np.float32(0.0)
    for r in prange(out.shape[0]):
        row = out[r]  # (C,)
        for j in range(out.shape[1]):
            row[j] = zero
        c = cols[r]
        if c >= 0:
            row[c] = value


@njit(parallel=True, cache=True)
def exp_flat(x):
    """exp (section 3.1) of each element of the 1-d float32 array x."""
    y = np.empty_like(x)  # (n,)
    for i in prange(x.shape[0]):
        y[i] = exp_f32(x[i])
    return y


@njit(parallel=True, cache=True)
def log_flat(x):
    """log (section 3.2) of each element of the 1-d float32 array x."""
    y = np.empty_like(x)  # (n,)
    for i in prange(x.shape[0]):
        y[i] = log_f32(x[i])
    return y


@njit(parallel=True, cache=True)
def silu_flat(x):
    """x / (1 + exp(-x)) of each element (section 3.3)."""
    y = np.empty_like(x)  # (n,)
    for i in prange(x.shape[0]):
        xi = x[i]
        y[i] = xi / (ONE + exp_f32(-xi))
    return y


@njit(parallel=True, cache=True)
def silu_backward_flat(x, dy):
    """dy * g with g = s * (1 + x * (1 - s)) and s = 1 / (1 + exp(-x)) (section 3.3). x, dy: (n,)."""
    dx = np.empty_like(x)  # (n,)
    for i in prange(x.shape[0]):
        xi = x[i]
        s = ONE / (ONE + exp_f32(-xi))
        g = s * (ONE + xi * (ONE - s))
        dx[i] = dy[i] * g
    return dx


@njit(parallel=True, cache=True)
def adamw_into(p, g, m, v, b1, omb1, b2, omb2, ss, sbc2, decay, eps, p2, m2, v2):
    """One AdamW update (section 4.6) on flat arrays, written to p2, m2, v2 (which may be p, m, v
    themselves: each element is read before it is written).

    Preconditions: the scalars are float32 and were computed on the host as
    the document says (omb1 = 1 - beta1, omb2 = 1 - beta2, ss = lr / bc1,
    sbc2 = sqrt(bc2), decay = 1 - lr * weight_decay); p2, m2, v2 are of p's
    length. The caller allocates new ones with numpy, whose large arrays are
    backed by huge pages: numba's own allocator faulted them in 4 KiB at a
    time, more than half of the update's time (docs/benchmarks.md).
    """
    for i in prange(p.shape[0]):
        gi = g[i]
        mi = b1 * m[i] + omb1 * gi
        vi = b2 * v[i] + omb2 * (gi * gi)
        den = np.sqrt(vi) / sbc2 + eps
        p2[i] = p[i] * decay - ss * (mi / den)
        m2[i] = mi
        v2[i] = vi
