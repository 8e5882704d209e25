"""The layout and elementwise ops an engine needs between kernels, on numpy arrays.

These are the `reference` and `cpu` backends' versions (both re-export them),
and what the `triton` backend does with numpy inputs. Each is exactly the numpy
expression the engine used inline before they moved behind the backend, so no
bit changed: float32 `+` and `/` are rounded once, the rest are exact copies.
Arrays stay numpy arrays: to_device and to_host move nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from kernels import validate
from kernels.backend_contract import Scalar


def to_device(x: np.ndarray) -> np.ndarray:
    """A host array as this backend's array: the array itself."""
    return x


def to_host(x: npt.NDArray[Any] | np.generic) -> np.ndarray:
    """This backend's array (or a numpy scalar) as a numpy array: np.asarray(x), no copy of an array."""
    return np.asarray(x)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a + b, float32, rounded once (arrays of one shape, or 0-d values)."""
    total: np.ndarray = a + b
    return total


def div_scalar(x: np.ndarray, d: Scalar) -> np.ndarray:
    """x / float32(d), rounded once (exact when d is a power of two and the quotient is normal)."""
    quotient: np.ndarray = x / np.float32(d)
    return quotient


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a * b elementwise, float32, rounded once (arrays of one shape)."""
    validate.check_pair(a, "a", b, "b")
    product: np.ndarray = a * b
    return product


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """Rotary positions (docs/arithmetic.md, section 4.7): x (BH, T, D), cos and sin (T, D/2) -> (BH, T, D).

    With x1, x2 the first and second halves of each row of x and c, s the
    position's table rows: y1 = x1 c - x2 s, y2 = x2 c + x1 s; each product
    and each sum rounded once, never fused. rope(dy, cos, -sin) is its backward.
    """
    _, _, d = validate.check_rope(x, cos, sin)
    h = d // 2
    x1, x2 = x[..., :h], x[..., h:]
    y = np.empty_like(x)
    y[..., :h] = x1 * cos - x2 * sin
    y[..., h:] = x2 * cos + x1 * sin
    return y


def repeat_heads(x: np.ndarray, groups: int) -> np.ndarray:
    """(BKV, T, D) -> (BKV * groups, T, D): row j * groups + g is a copy of row j (exact)."""
    validate.check_head_groups(x, groups, summing=False)
    return np.repeat(x, groups, axis=0)


def sum_head_groups(x: np.ndarray, groups: int) -> np.ndarray:
    """(BKV * groups, T, D) -> (BKV, T, D): row j is ((x[jG] + x[jG+1]) + ...) + x[jG+G-1], a left fold."""
    rows, t, d, g = validate.check_head_groups(x, groups, summing=True)
    parts = x.reshape(rows // g, g, t, d)
    total = np.ascontiguousarray(parts[:, 0])
    for i in range(1, g):
        total = total + parts[:, i]
    return total


def split_heads(x: np.ndarray, B: int, T: int, H: int) -> np.ndarray:
    """(N, C) -> (BH, T, D), contiguous: head h of sequence b is row b*H + h."""
    D = x.shape[1] // H
    return np.ascontiguousarray(x.reshape(B, T, H, D).transpose(0, 2, 1, 3)).reshape(B * H, T, D)


def merge_heads(x: np.ndarray, B: int, H: int) -> np.ndarray:
    """(BH, T, D) -> (N, C), the inverse of split_heads."""
    _, T, D = x.shape
    return np.ascontiguousarray(x.reshape(B, H, T, D).transpose(0, 2, 1, 3)).reshape(B * T, H * D)


def split_tokens(tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """int64 tokens (B, T+1) -> (inputs (N,), targets (N,), positions (N,)), N = B*T, all int64 contiguous.

    inputs = tokens[:, :-1], targets = tokens[:, 1:] (row by row), positions 0..T-1 repeated B times.
    """
    B, T = tokens.shape[0], tokens.shape[1] - 1
    idx = np.ascontiguousarray(tokens[:, :-1]).reshape(B * T)
    targets = np.ascontiguousarray(tokens[:, 1:]).reshape(B * T)
    pos = np.tile(np.arange(T, dtype=np.int64), B)
    return idx, targets, pos
