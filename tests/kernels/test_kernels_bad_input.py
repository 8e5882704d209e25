"""Bad input raises KernelInputError with a one-line message that carries the numbers.

Every in-process backend is held to the same messages (they share
kernels.validate); the triton backend's refusals are checked in its probe.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import IN_PROCESS_BACKENDS

from kernels import KernelInputError, get_backend

f32 = np.float32


def ones(*shape, dtype=f32):
    return np.ones(shape, dtype=dtype)


IDX = np.array([0, 4, 2], dtype=np.int64)

# (name, call on a backend module, regex the message must match)
BAD = [
    ("matmul float64", lambda B: B.matmul(ones(3, 4, dtype=np.float64), ones(4, 2)), r"^a has dtype float64, want float32$"),
    ("matmul list", lambda B: B.matmul([[1.0]], ones(1, 1)), r"^a is a list, want a numpy float32 array$"),
    ("matmul inner", lambda B: B.matmul(ones(3, 4), ones(3, 4)), r"^b has 3 rows, want 4 \(a's columns\)$"),
    ("matmul_nt inner", lambda B: B.matmul_nt(ones(3, 4), ones(2, 5)), r"^b has 5 columns, want 4"),
    ("matmul_tn inner", lambda B: B.matmul_tn(ones(3, 4), ones(2, 5)), r"^b has 2 rows, want 3"),
    ("matmul batch", lambda B: B.matmul(ones(2, 3, 4), ones(3, 4, 5)), r"batch size 2 .* 3, want equal"),
    ("matmul 2d x 3d", lambda B: B.matmul(ones(3, 4), ones(1, 4, 5)), r"a is 2-d and b is 3-d"),
    ("matmul 1-d", lambda B: B.matmul(ones(4), ones(4, 5)), r"^a is 1-d with shape \(4,\), want 2-d or 3-d$"),
    ("sum_rows transposed", lambda B: B.sum_rows(ones(3, 4).T), r"^x is not C-contiguous \(strides \(4, 16\)\)"),
    ("max_rows no columns", lambda B: B.max_rows(ones(3, 0)), r"^x has 0 columns, want at least 1$"),
    ("exp int32", lambda B: B.exp(np.ones(3, dtype=np.int32)), r"^x has dtype int32, want float32$"),
    ("silu_backward shapes", lambda B: B.silu_backward(ones(3, 4), ones(4, 3)), r"^dy has shape \(4, 3\), want \(3, 4\)"),
    ("softmax not square", lambda B: B.softmax_causal(ones(2, 3, 4)), r"^s has shape \(2, 3, 4\), want \(BH, T, T\)"),
    ("softmax 2-d", lambda B: B.softmax_causal(ones(3, 3)), r"^s is 2-d"),
    ("softmax_backward shapes", lambda B: B.softmax_causal_backward(ones(1, 3, 3), ones(1, 2, 2)), r"^dp has shape"),
    ("attention k shape", lambda B: B.attention(ones(1, 5, 4), ones(1, 6, 4), ones(1, 5, 4)), r"^k has shape \(1, 6, 4\), want \(1, 5, 4\)"),
    ("attention_backward p", lambda B: B.attention_backward(*(ones(1, 5, 4),) * 3, ones(1, 5, 4), ones(1, 5, 4)),
     r"^p has shape \(1, 5, 4\), want \(1, 5, 5\)"),
    ("rmsnorm w", lambda B: B.rmsnorm(ones(3, 4), ones(3), 1e-5), r"^w has shape \(3,\), want \(4,\) \(x's columns\)$"),
    ("rmsnorm eps", lambda B: B.rmsnorm(ones(3, 4), ones(4), "1e-5"), r"^eps is a str, want a real number$"),
    ("rmsnorm_backward rstd", lambda B: B.rmsnorm_backward(ones(3, 4), ones(4), ones(4), ones(3, 4)), r"^rstd has shape \(4,\), want \(3,\)"),
    ("cross_entropy target", lambda B: B.cross_entropy(ones(3, 5), IDX + 1), r"^targets\[1\] = 5 is outside \[0, 5\)$"),
    ("cross_entropy count", lambda B: B.cross_entropy(ones(2, 5), IDX), r"^targets has 3 entries, want 2"),
    ("cross_entropy float targets", lambda B: B.cross_entropy(ones(3, 5), IDX.astype(f32)), r"^targets has dtype float32, want int64$"),
    ("cross_entropy no rows", lambda B: B.cross_entropy(ones(0, 5), IDX[:0]), r"^logits has 0 rows, want at least 1"),
    ("embedding index", lambda B: B.embedding(ones(4, 2), IDX), r"^idx\[1\] = 4 is outside \[0, 4\)$"),
    ("embedding negative", lambda B: B.embedding(ones(5, 2), -IDX), r"^idx\[1\] = -4 is outside \[0, 5\)$"),
    ("embedding int32", lambda B: B.embedding(ones(5, 2), IDX.astype(np.int32)), r"^idx has dtype int32, want int64$"),
    ("embedding_backward rows", lambda B: B.embedding_backward(IDX, ones(2, 3), 5), r"^dout has 2 rows, want 3 \(idx's length\)$"),
    ("embedding_backward vocab", lambda B: B.embedding_backward(IDX, ones(3, 3), 0), r"^vocab_size = 0, want at least 1$"),
    ("embedding_backward index", lambda B: B.embedding_backward(IDX, ones(3, 3), 4), r"^idx\[1\] = 4 is outside \[0, 4\)$"),
    ("adamw step", lambda B: B.adamw(*(ones(3),) * 4, 0, 1e-3, 0.9, 0.999, 1e-8, 0.0), r"^step = 0, want at least 1$"),
    ("adamw float step", lambda B: B.adamw(*(ones(3),) * 4, 1.0, 1e-3, 0.9, 0.999, 1e-8, 0.0), r"^step is a float, want an integer$"),
    ("adamw shapes", lambda B: B.adamw(ones(3), ones(3), ones(4), ones(3), 1, 1e-3, 0.9, 0.999, 1e-8, 0.0), r"^m has shape \(4,\), want \(3,\)"),
]  # fmt: skip


@pytest.mark.parametrize("backend_name", IN_PROCESS_BACKENDS + ("reference",))
@pytest.mark.parametrize("name,call,pattern", BAD, ids=[b[0] for b in BAD])
def test_bad_input_raises_kernel_input_error(backend_name, name, call, pattern):
    backend = get_backend(backend_name)
    with pytest.raises(KernelInputError, match=pattern) as info:
        call(backend)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_unknown_backend_is_refused():
    with pytest.raises(KernelInputError, match=r"unknown backend 'gpu', want one of reference, cpu, triton"):
        get_backend("gpu")


@pytest.mark.parametrize("backend_name", IN_PROCESS_BACKENDS + ("reference",))
def test_refused_call_leaves_inputs_alone(backend_name):
    backend = get_backend(backend_name)
    table, idx = np.arange(8, dtype=f32).reshape(4, 2), np.array([0, 3, 4], dtype=np.int64)
    with pytest.raises(KernelInputError):
        backend.embedding(table, idx)
    assert table.tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]] and idx.tolist() == [0, 3, 4]
