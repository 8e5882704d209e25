"""Canonical-order float32 arithmetic: one definition, three backends, same bits.

The definition is docs/arithmetic.md, in versions 1 and 2 (kernels/versions.py:
version 2 folds dot products with a fused multiply-add); a run's manifest names
its version, `ARITHMETIC_VERSION` is the one new runs use. Every
backend is a module exposing the same functions, all on float32 numpy arrays
(C-contiguous; outputs are new arrays). Shapes use this legend:
R rows, C columns, M/N/K matrix sizes, T sequence length, D head size,
BH batch*heads, V vocabulary, N tokens.

    matmul(a, b)            (M, K) @ (K, N) -> (M, N); also batched (BH, M, K)
    matmul_nt(a, b)         (M, K) @ (N, K)^T -> (M, N); also batched
    matmul_tn(a, b)         (K, M)^T @ (K, N) -> (M, N); also batched
    sum_rows(x)             (R, C) -> (R,)    pairwise halving tree
    sum_cols(x)             (R, C) -> (C,)    pairwise halving tree down columns
    max_rows(x)             (R, C) -> (R,)    pairwise max tree
    exp(x), log(x)          any shape, elementwise
    silu(x)                 any shape; silu_backward(x, dy) -> dx
    softmax_causal(s)       (BH, T, T) -> p; softmax_causal_backward(p, dp) -> ds
    attention(q, k, v)      (BH, T, D) x3 -> (o (BH, T, D), p (BH, T, T))
    attention_backward(q, k, v, p, do) -> (dq, dk, dv)
    rmsnorm(x, w, eps)      (R, C), (C,) -> (y (R, C), rstd (R,))
    rmsnorm_backward(x, w, rstd, dy) -> (dx (R, C), dw (C,))
    cross_entropy(logits, targets)           (N, V), int64 (N,) -> loss (float32 0-d array)
    cross_entropy_backward(logits, targets, dloss) -> dlogits (N, V)
    embedding(table, idx)   (V, C), int64 (N,) -> (N, C)
    embedding_backward(idx, dout, vocab_size) -> dtable (V, C)
    adamw(p, g, m, v, step, lr, beta1, beta2, eps, weight_decay) -> (p', m', v')

Between kernels, an engine needs a few exact layout and elementwise ops; with
them (and the two transfers) a whole step stays in the backend's own arrays.
On numpy these are the numpy expressions of kernels/numpy_layout.py, which the
reference and cpu backends re-export (to_device and to_host move nothing); the
triton backend does them on its device tensors, with the same bits:

    to_device(x)            numpy array -> the backend's array (triton: one host-to-device copy)
    to_host(x)              the backend's array -> numpy array (triton: one device-to-host copy)
    add(a, b)               float32 a + b, one rounding; same shape (or two 0-d values)
    div_scalar(x, d)        float32 x / float32(d), one rounding
    split_heads(x, B, T, H) (N, C) -> (BH, T, D), contiguous; merge_heads(x, B, H) is its inverse
    split_tokens(tokens)    int64 (B, T+1) -> (inputs, targets, positions), each int64 (B*T,)
    mul(a, b)               float32 a * b, one rounding; same shape (SwiGLU)
    rope(x, cos, sin)       (BH, T, D), (T, D/2) x2 -> (BH, T, D): rotary positions (section 4.7)
    repeat_heads(x, G)      (BKV, T, D) -> (BKV*G, T, D), each head copied G times (grouped-query attention)
    sum_head_groups(x, G)   (BKV*G, T, D) -> (BKV, T, D), each run of G heads summed left to right

Scalars (eps, lr, betas, dloss) are Python floats or numpy float32; each
backend converts them with `numpy.float32` before use. Bad input (wrong dtype,
shape mismatch, index out of range) raises `KernelInputError`.

The same list as a typing.Protocol, with the types, is `Backend` in
kernels/backend_contract.py; mypy holds every backend module to it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Literal, overload

from kernels.host_heap import keep_freed_memory
from kernels.input_error import KernelInputError as KernelInputError
from kernels.versions import at_version, check_version

if TYPE_CHECKING:  # kept out of the import itself: `import kernels` loads no numpy
    from kernels.backend_contract import Backend, HostArray
    from kernels.cpu_sha256 import Lanes

# What a new run uses (`train --arithmetic 1` for version 1); runs of either version replay in the version their
# manifest names. `get_backend`'s own default stays version 1: the backend module itself (kernels/versions.py).
ARITHMETIC_VERSION = 2
BACKENDS = ("reference", "cpu", "triton")

_MODULES = {"reference": "kernels.reference", "cpu": "kernels.cpu", "triton": "kernels.triton_backend"}
_DIGEST_MODULES = {"cpu": "kernels.cpu_sha256"}  # the cpu backend's SHA-256 lanes, loaded by name as it is
_HOST_MODULES = {"float modes": "kernels.cpu_float_modes"}  # the host thread's MXCSR, loaded by name


@overload
def get_backend(name: Literal["reference", "cpu"], arithmetic: int = 1) -> Backend[HostArray]: ...


@overload
def get_backend(name: str, arithmetic: int = 1) -> Backend[Any]: ...


def get_backend(name: str, arithmetic: int = 1) -> Backend[Any]:
    """Return the backend called `name` (one of BACKENDS) at arithmetic version `arithmetic`.

    Version 1 is the backend module itself; version 2 the same module with its
    dot-product folds fused (kernels/versions.py). The numpy backends are
    `Backend[HostArray]`; triton's arrays are torch tensors, which only
    kernels.triton_* may name, so a name known only at run time gives `Backend[Any]`.
    """
    check_version(arithmetic)
    if name not in _MODULES:
        raise KernelInputError(f"unknown backend {name!r}, want one of {', '.join(BACKENDS)}")
    if name != "triton":
        keep_freed_memory()  # host arrays: a step's new state reuses the old one's pages (kernels/host_heap.py)
    # mypy checks each module against Backend (kernels/backend_contract.py, kernels/triton_backend.py).
    return at_version(importlib.import_module(_MODULES[name]), arithmetic)


def state_lanes() -> Lanes | None:
    """SHA-256 of sixteen tensors per vector instruction (kernels/cpu_sha256.py) where that beats hashlib here
    (numba compiles for AVX-512), else None: what p2paudit.tensor_digest.digest_state takes as `lanes`.
    Loaded by name like the cpu backend (numba) on first use, so `import kernels` stays light."""
    lanes: Lanes | None = importlib.import_module(_DIGEST_MODULES["cpu"]).state_lanes()
    return lanes


def standard_float_modes() -> None:
    """Write x86-64's standard floating-point control word for the calling thread (round to nearest, subnormals
    kept, exceptions masked: docs/arithmetic.md 1; foreign code in the process, a lab script, may have changed
    it for this thread): kernels/cpu_float_modes.py, loaded by name on first use."""
    importlib.import_module(_HOST_MODULES["float modes"]).standard_modes()
