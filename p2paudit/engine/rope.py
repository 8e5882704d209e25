"""The rotary-position tables of the Llama family (docs/arithmetic.md, section 4.7), computed on the host.

The tables depend only on the model (seq_len, head size, rope_theta), never on
a step's data, and are built from the canonical sin, cos and pow of
kernels/lab_math.py, so every machine computes the same bits before any kernel
runs; the engine uploads them to the backend with each forward pass.
"""

from __future__ import annotations

import functools

import numpy as np

from kernels import lab_math
from p2paudit.engine.config import ModelConfig

F32 = np.float32


# A few models' tables at most: a daemon meets strangers' configs, and one table set of the largest allowed
# shape (seq_len 8192, head size 8192) is 400 MB, so the cache is bounded, not keyed forever.
TABLE_CACHE_SIZE = 4


@functools.lru_cache(maxsize=TABLE_CACHE_SIZE)
def _tables(seq_len: int, head_dim: int, theta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    half = head_dim // 2
    exponent = -(np.arange(half, dtype=F32) * F32(2)) / F32(head_dim)  # -(2i) / D: the division rounds once
    inv_freq = lab_math.pow_scalar_base(F32(theta), exponent)  # theta^(-2i/D) = exp(exponent * log(theta))
    angle = np.ascontiguousarray(np.arange(seq_len, dtype=F32)[:, None] * inv_freq[None, :])  # (T, D/2), t * f_i
    sin = lab_math.sin(angle)
    tables = (lab_math.cos(angle), sin, np.negative(sin))  # -sin is exact: the backward pass rotates by -angle
    for table in tables:
        table.flags.writeable = False  # cached: shared by every caller
    return tables


def rope_tables(model: ModelConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(cos, sin, -sin), each float32 (seq_len, head_dim / 2), read-only, for a llama-family model."""
    return _tables(model.seq_len, model.head_dim, model.rope_theta)
