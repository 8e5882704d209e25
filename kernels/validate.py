"""Input checks shared by every backend, so all three reject the same inputs.

Each `check_*` function raises `KernelInputError` with a one-line message that
names the argument and carries the numbers ("b has 5 rows, want 7 (a's
columns)"), or returns the sizes the kernel needs. Nothing is converted or
copied: a kernel either gets exactly what it asked for or an error.
"""

from __future__ import annotations

import numbers

import numpy as np

from kernels import KernelInputError


def check_float32(x: object, name: str) -> np.ndarray:
    """Return `x` if it is a C-contiguous float32 numpy array, else raise."""
    if not isinstance(x, np.ndarray):
        raise KernelInputError(f"{name} is a {type(x).__name__}, want a numpy float32 array")
    if x.dtype != np.float32:
        raise KernelInputError(f"{name} has dtype {x.dtype}, want float32")
    if not x.flags.c_contiguous:
        raise KernelInputError(f"{name} is not C-contiguous (strides {x.strides}), want a C-contiguous array")
    return x


def check_ndim(x: np.ndarray, name: str, ndims: tuple[int, ...]) -> None:
    """Raise unless `x.ndim` is one of `ndims`."""
    if x.ndim not in ndims:
        want = " or ".join(f"{d}-d" for d in ndims)
        raise KernelInputError(f"{name} is {x.ndim}-d with shape {x.shape}, want {want}")


def check_same_shape(x: np.ndarray, name: str, ref: np.ndarray, ref_name: str) -> None:
    """Raise unless `x` has exactly the shape of `ref`."""
    if x.shape != ref.shape:
        raise KernelInputError(f"{name} has shape {x.shape}, want {ref.shape} (the shape of {ref_name})")


def check_index(idx: object, name: str, size: int) -> np.ndarray:
    """Return `idx` if it is a 1-d C-contiguous int64 array with values in [0, size)."""
    if not isinstance(idx, np.ndarray):
        raise KernelInputError(f"{name} is a {type(idx).__name__}, want a numpy int64 array")
    if idx.dtype != np.int64:
        raise KernelInputError(f"{name} has dtype {idx.dtype}, want int64")
    if idx.ndim != 1:
        raise KernelInputError(f"{name} is {idx.ndim}-d with shape {idx.shape}, want 1-d")
    if not idx.flags.c_contiguous:
        raise KernelInputError(f"{name} is not C-contiguous (strides {idx.strides}), want a C-contiguous array")
    bad = np.flatnonzero((idx < 0) | (idx >= size))
    if bad.size:
        i = int(bad[0])
        raise KernelInputError(f"{name}[{i}] = {int(idx[i])} is outside [0, {size})")
    return idx


def check_size(value: object, name: str, minimum: int) -> int:
    """Return `value` as an int if it is an integer >= minimum (bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise KernelInputError(f"{name} is a {type(value).__name__}, want an integer")
    if value < minimum:
        raise KernelInputError(f"{name} = {int(value)}, want at least {minimum}")
    return int(value)


def to_float32(value: object, name: str) -> np.float32:
    """Convert a Python float/int or numpy float32 scalar to numpy.float32.

    A float64 numpy scalar or Python float is rounded once to nearest, which is
    how the host scalars of docs/arithmetic.md section 1 enter a kernel.
    """
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating)):
        raise KernelInputError(f"{name} is a {type(value).__name__}, want a real number")
    return np.float32(value)


def check_matmul(a: object, b: object, layout: str) -> tuple[int, int, int]:
    """Check the operands of matmul ("nn"), matmul_nt ("nt") or matmul_tn ("tn").

    Both must be float32 and C-contiguous, both 2-d or both 3-d with the same
    batch size. Returns (M, K, N) of each product.
    """
    a = check_float32(a, "a")
    b = check_float32(b, "b")
    check_ndim(a, "a", (2, 3))
    check_ndim(b, "b", (2, 3))
    if a.ndim != b.ndim:
        raise KernelInputError(f"a is {a.ndim}-d and b is {b.ndim}-d, want both 2-d or both 3-d")
    if a.ndim == 3 and a.shape[0] != b.shape[0]:
        raise KernelInputError(f"a has batch size {a.shape[0]} and b has {b.shape[0]}, want equal (no broadcasting)")
    (ar, ac), (br, bc) = a.shape[-2:], b.shape[-2:]
    if layout == "nn":
        m, k, kb, n, what = ar, ac, br, bc, "b has {kb} rows, want {k} (a's columns)"
    elif layout == "nt":
        m, k, kb, n, what = ar, ac, bc, br, "b has {kb} columns, want {k} (a's columns)"
    elif layout == "tn":
        m, k, kb, n, what = ac, ar, br, bc, "b has {kb} rows, want {k} (a's rows)"
    else:
        raise KernelInputError(f"unknown matmul layout {layout!r}, want 'nn', 'nt' or 'tn'")
    if k != kb:
        raise KernelInputError(what.format(kb=kb, k=k))
    return m, k, n


def check_rows(x: object, name: str = "x", min_cols: int = 0) -> tuple[int, int]:
    """Check a 2-d float32 matrix with at least `min_cols` columns; return (R, C)."""
    x = check_float32(x, name)
    check_ndim(x, name, (2,))
    if x.shape[1] < min_cols:
        raise KernelInputError(f"{name} has {x.shape[1]} columns, want at least {min_cols}")
    return x.shape


def check_elementwise(x: object, name: str = "x") -> np.ndarray:
    """Check an elementwise operand: a float32 C-contiguous array of any shape."""
    return check_float32(x, name)


def check_pair(x: object, x_name: str, y: object, y_name: str) -> None:
    """Check two float32 arrays of identical shape (e.g. x and dy)."""
    x = check_float32(x, x_name)
    y = check_float32(y, y_name)
    check_same_shape(y, y_name, x, x_name)


def check_square_scores(s: object, name: str) -> tuple[int, int]:
    """Check a (BH, T, T) float32 score or probability array; return (BH, T)."""
    s = check_float32(s, name)
    check_ndim(s, name, (3,))
    if s.shape[1] != s.shape[2]:
        raise KernelInputError(f"{name} has shape {s.shape}, want (BH, T, T) with equal last two sizes")
    return s.shape[0], s.shape[1]


def check_softmax_backward(p: object, dp: object) -> tuple[int, int]:
    """Check p and dp of softmax_causal_backward; return (BH, T)."""
    sizes = check_square_scores(p, "p")
    check_pair(p, "p", dp, "dp")
    return sizes


def check_attention(q: object, k: object, v: object) -> tuple[int, int, int]:
    """Check q, k, v: float32 (BH, T, D) each, same shape; return (BH, T, D)."""
    q = check_float32(q, "q")
    check_ndim(q, "q", (3,))
    check_pair(q, "q", k, "k")
    check_pair(q, "q", v, "v")
    if q.shape[2] < 1:
        raise KernelInputError(f"q has head size {q.shape[2]}, want at least 1")
    return q.shape


def check_attention_backward(q: object, k: object, v: object, p: object, do: object) -> tuple[int, int, int]:
    """Check the inputs of attention_backward; return (BH, T, D)."""
    bh, t, d = check_attention(q, k, v)
    check_pair(q, "q", do, "do")
    p = check_float32(p, "p")
    if p.shape != (bh, t, t):
        raise KernelInputError(f"p has shape {p.shape}, want {(bh, t, t)} (BH, T, T) from q's shape")
    return bh, t, d


def check_rmsnorm(x: object, w: object) -> tuple[int, int]:
    """Check x (R, C) with C >= 1 and w (C,); return (R, C)."""
    r, c = check_rows(x, "x", min_cols=1)
    w = check_float32(w, "w")
    if w.shape != (c,):
        raise KernelInputError(f"w has shape {w.shape}, want ({c},) (x's columns)")
    return r, c


def check_rmsnorm_backward(x: object, w: object, rstd: object, dy: object) -> tuple[int, int]:
    """Check x (R, C), w (C,), rstd (R,), dy (R, C); return (R, C)."""
    r, c = check_rmsnorm(x, w)
    rstd = check_float32(rstd, "rstd")
    if rstd.shape != (r,):
        raise KernelInputError(f"rstd has shape {rstd.shape}, want ({r},) (x's rows)")
    check_pair(x, "x", dy, "dy")
    return r, c


def check_cross_entropy(logits: object, targets: object) -> tuple[int, int]:
    """Check logits (N, V) with N, V >= 1 and targets int64 (N,) in [0, V); return (N, V)."""
    n, v = check_rows(logits, "logits", min_cols=1)
    if n < 1:
        raise KernelInputError("logits has 0 rows, want at least 1 (the loss is a mean over rows)")
    targets = check_index(targets, "targets", v)
    if targets.shape[0] != n:
        raise KernelInputError(f"targets has {targets.shape[0]} entries, want {n} (logits' rows)")
    return n, v


def check_embedding(table: object, idx: object) -> tuple[int, int, int]:
    """Check table (V, C) and idx int64 (N,) in [0, V); return (V, C, N)."""
    v, c = check_rows(table, "table")
    idx = check_index(idx, "idx", v)
    return v, c, idx.shape[0]


def check_embedding_backward(idx: object, dout: object, vocab_size: object) -> tuple[int, int, int]:
    """Check idx int64 (N,) in [0, vocab_size) and dout (N, C); return (V, C, N)."""
    v = check_size(vocab_size, "vocab_size", 1)
    idx = check_index(idx, "idx", v)
    n, c = check_rows(dout, "dout")
    if n != idx.shape[0]:
        raise KernelInputError(f"dout has {n} rows, want {idx.shape[0]} (idx's length)")
    return v, c, n


def check_adamw(p: object, g: object, m: object, v: object, step: object) -> int:
    """Check p, g, m, v (float32, one shape) and step (integer >= 1); return step."""
    p = check_float32(p, "p")
    for other, name in ((g, "g"), (m, "m"), (v, "v")):
        check_pair(p, "p", other, name)
    return check_size(step, "step", 1)


def check_rope(x: object, cos: object, sin: object) -> tuple[int, int, int]:
    """Check x (BH, T, D) with D even and the tables cos, sin (T, D/2); return (BH, T, D)."""
    x = check_float32(x, "x")
    check_ndim(x, "x", (3,))
    bh, t, d = x.shape
    if d % 2:
        raise KernelInputError(f"x has an odd last dimension {d}, want an even head size")
    for name, table in (("cos", cos), ("sin", sin)):
        table = check_float32(table, name)
        if table.shape != (t, d // 2):
            raise KernelInputError(f"{name} has shape {table.shape}, want {(t, d // 2)} (x's T, D/2)")
    return bh, t, d


def check_head_groups(x: object, groups: object, summing: bool) -> tuple[int, int, int, int]:
    """Check x (rows, T, D) and a group size; when summing, rows must divide by it. Return (rows, T, D, G)."""
    x = check_float32(x, "x")
    check_ndim(x, "x", (3,))
    g = check_size(groups, "groups", 1)
    if summing and x.shape[0] % g:
        raise KernelInputError(f"x has {x.shape[0]} heads, not a multiple of groups {g}")
    return x.shape[0], x.shape[1], x.shape[2], g
