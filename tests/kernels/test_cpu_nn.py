"""The `cpu` row kernels on both of their paths: register trees and the scratch tree.

Rows whose length is a power of two in [16, 1024] are reduced in vector
registers (kernels/cpu_rowtree.py), other rows through a scratch buffer
(kernels/cpu_scalar.py). Cross-entropy and RMSNorm take either path by their
width; both must give the reference's bits, with large, tiny and infinite
logits and mixed magnitudes.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import describe_difference

from kernels import cpu, reference

F32 = np.float32
WIDTHS = [1, 15, 16, 17, 256, 1000, 1024, 2048]  # 16, 256, 1024: registers; 2048: past them


def _outputs(result):
    return result if isinstance(result, tuple) else (result,)


@pytest.mark.parametrize("v", WIDTHS)
def test_cross_entropy_both_paths(v):
    rng = np.random.default_rng(v)
    logits = (rng.standard_normal((19, v)) * rng.choice(np.array([1e-3, 1.0, 30.0], F32), (19, v))).astype(F32)
    logits[rng.random(logits.shape) < 0.02] = -np.inf  # a masked logit: exp gives +0.0
    targets = rng.integers(0, v, 19)
    assert describe_difference(cpu.cross_entropy(logits, targets), reference.cross_entropy(logits, targets)) is None
    got = cpu.cross_entropy_backward(logits, targets, 0.7)
    assert describe_difference(got, reference.cross_entropy_backward(logits, targets, 0.7)) is None


@pytest.mark.parametrize("c", WIDTHS)
def test_rmsnorm_both_paths(c):
    rng = np.random.default_rng(c + 1)
    x = (rng.standard_normal((21, c)) * rng.choice(np.array([1e-30, 1.0, 1e10], F32), (21, c))).astype(F32)
    w = rng.standard_normal(c).astype(F32)
    dy = rng.standard_normal((21, c)).astype(F32)
    for got, want in zip(cpu.rmsnorm(x, w, 1e-5), reference.rmsnorm(x, w, 1e-5)):
        assert describe_difference(got, want) is None
    _, rstd = reference.rmsnorm(x, w, 1e-5)
    for got, want in zip(cpu.rmsnorm_backward(x, w, rstd, dy), reference.rmsnorm_backward(x, w, rstd, dy)):
        assert describe_difference(got, want) is None


@pytest.mark.parametrize("t", [1, 2, 16, 17, 33])
def test_softmax_rows_of_every_length(t):
    # Row t of a causal softmax has t + 1 entries: every length from 1 to T.
    rng = np.random.default_rng(t)
    s = (rng.standard_normal((3, t, t)) * 8).astype(F32)
    p = cpu.softmax_causal(s)
    assert describe_difference(p, reference.softmax_causal(s)) is None
    dp = rng.standard_normal((3, t, t)).astype(F32)
    assert describe_difference(cpu.softmax_causal_backward(p, dp), reference.softmax_causal_backward(p, dp)) is None


def test_max_row_register_path_keeps_nan_and_zero_signs():
    row = np.full((3, 64), -0.0, F32)
    row[1, 10] = 0.0  # max2 keeps whichever zero the tree meets first
    row[2, 40] = np.nan
    got, want = cpu.max_rows(row), reference.max_rows(row)
    assert describe_difference(got, want) is None
    assert np.isnan(got[2])
