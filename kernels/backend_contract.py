"""The backend contract: the functions every backend module provides, as a typing.Protocol.

A backend is a module (kernels.reference, kernels.cpu, kernels.triton_backend),
and a module satisfies a Protocol structurally: mypy holds each one to
`Backend` (a typed assignment of the module to itself at the end of each
backend module), and tests/kernels/test_backend_contract.py checks
at run time that every backend has every function named here, with these
parameter names.

`Backend` is generic in the backend's array type `ArrayT`: the type its
kernels take and return, and `to_device` makes from a host numpy array.
The reference and cpu backends compute on numpy arrays (`Backend[HostArray]`:
to_device and to_host move nothing); the triton backend on torch tensors on
its device (`Backend[torch.Tensor]`). Code written once for every backend is
generic in ArrayT, or takes `Backend[Any]` (what `kernels.get_backend` gives
for a name known only at run time).

Values, as kernels/__init__.py documents them: arrays are float32 (indices,
tokens and positions int64), C-contiguous, outputs new arrays; a 0-d array
is an array too (cross_entropy's loss). Host scalars are `Scalar`, which each
backend rounds once to numpy.float32. Sizes and the AdamW step are Python ints.
Shape legend: see kernels/__init__.py.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeAlias, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

# A numpy array on the host: float32 values, or int64 tokens and indices (the dtype is checked at run time).
HostArray: TypeAlias = npt.NDArray[Any]
# A host scalar (eps, lr, the betas, dloss, a divisor): rounded once to numpy.float32 by the backend.
Scalar: TypeAlias = float | np.float32

ArrayT = TypeVar("ArrayT")


@runtime_checkable
class Backend(Protocol[ArrayT]):
    """Every function a backend module provides; ArrayT is the backend's array type."""

    # matrix products: left fold over k from k = 0 (docs/arithmetic.md section 2.3); `fused`: version 2's
    # fold (section 7), fma(a, b, acc) per k; kernels.get_backend(name, 2) passes it (kernels/versions.py)
    def matmul(self, a: ArrayT, b: ArrayT, *, fused: bool = False) -> ArrayT:
        """(M, K) @ (K, N) -> (M, N); also batched (BH, M, K) @ (BH, K, N)."""
        ...

    def matmul_nt(self, a: ArrayT, b: ArrayT, *, fused: bool = False) -> ArrayT:
        """(M, K) @ (N, K)^T -> (M, N); also batched."""
        ...

    def matmul_tn(self, a: ArrayT, b: ArrayT, *, fused: bool = False) -> ArrayT:
        """(K, M)^T @ (K, N) -> (M, N); also batched."""
        ...

    # reductions: pairwise halving trees
    def sum_rows(self, x: ArrayT) -> ArrayT:
        """(R, C) -> (R,)."""
        ...

    def sum_cols(self, x: ArrayT) -> ArrayT:
        """(R, C) -> (C,), the tree down each column."""
        ...

    def max_rows(self, x: ArrayT) -> ArrayT:
        """(R, C) -> (R,), C >= 1."""
        ...

    # elementary functions, any shape
    def exp(self, x: ArrayT) -> ArrayT: ...

    def log(self, x: ArrayT) -> ArrayT: ...

    def silu(self, x: ArrayT) -> ArrayT: ...

    def silu_backward(self, x: ArrayT, dy: ArrayT) -> ArrayT:
        """dx, the shape of x and dy."""
        ...

    # composite operations
    def softmax_causal(self, s: ArrayT) -> ArrayT:
        """(BH, T, T) -> p (BH, T, T), +0.0 past the diagonal."""
        ...

    def softmax_causal_backward(self, p: ArrayT, dp: ArrayT) -> ArrayT:
        """(BH, T, T) x2 -> ds (BH, T, T)."""
        ...

    def attention(self, q: ArrayT, k: ArrayT, v: ArrayT, *, fused: bool = False) -> tuple[ArrayT, ArrayT]:
        """(BH, T, D) x3 -> (o (BH, T, D), p (BH, T, T))."""
        ...

    def attention_backward(
        self, q: ArrayT, k: ArrayT, v: ArrayT, p: ArrayT, do: ArrayT, *, fused: bool = False
    ) -> tuple[ArrayT, ArrayT, ArrayT]:
        """-> (dq, dk, dv), each (BH, T, D)."""
        ...

    def rmsnorm(self, x: ArrayT, w: ArrayT, eps: Scalar) -> tuple[ArrayT, ArrayT]:
        """(R, C), (C,) -> (y (R, C), rstd (R,))."""
        ...

    def rmsnorm_backward(self, x: ArrayT, w: ArrayT, rstd: ArrayT, dy: ArrayT) -> tuple[ArrayT, ArrayT]:
        """-> (dx (R, C), dw (C,))."""
        ...

    def cross_entropy(self, logits: ArrayT, targets: ArrayT) -> ArrayT:
        """(N, V), int64 (N,) -> the mean loss, a float32 0-d array."""
        ...

    def cross_entropy_backward(self, logits: ArrayT, targets: ArrayT, dloss: Scalar) -> ArrayT:
        """-> dlogits (N, V)."""
        ...

    def embedding(self, table: ArrayT, idx: ArrayT) -> ArrayT:
        """(V, C), int64 (N,) -> (N, C)."""
        ...

    def embedding_backward(self, idx: ArrayT, dout: ArrayT, vocab_size: int) -> ArrayT:
        """int64 (N,), (N, C) -> dtable (V, C)."""
        ...

    def adamw(
        self,
        p: ArrayT,
        g: ArrayT,
        m: ArrayT,
        v: ArrayT,
        step: int,
        lr: Scalar,
        beta1: Scalar,
        beta2: Scalar,
        eps: Scalar,
        weight_decay: Scalar,
    ) -> tuple[ArrayT, ArrayT, ArrayT]:
        """One update of p, g, m, v (one shape) -> (p', m', v')."""
        ...

    # between kernels: transfers, exact layout, one-rounding + and /
    def to_device(self, x: HostArray) -> ArrayT:
        """A host array as the backend's array."""
        ...

    def to_host(self, x: ArrayT) -> HostArray:
        """The backend's array as a host array."""
        ...

    def add(self, a: ArrayT, b: ArrayT) -> ArrayT: ...

    def div_scalar(self, x: ArrayT, d: Scalar) -> ArrayT: ...

    # the Llama family's ops (kernels/numpy_layout.py defines the bits)
    def mul(self, a: ArrayT, b: ArrayT) -> ArrayT:
        """a * b elementwise, one rounding; one shape."""
        ...

    def rope(self, x: ArrayT, cos: ArrayT, sin: ArrayT) -> ArrayT:
        """(BH, T, D), (T, D/2) x2 -> (BH, T, D): rotary positions."""
        ...

    def repeat_heads(self, x: ArrayT, groups: int) -> ArrayT:
        """(BKV, T, D) -> (BKV * groups, T, D), each head copied `groups` times in a row."""
        ...

    def sum_head_groups(self, x: ArrayT, groups: int) -> ArrayT:
        """(BKV * groups, T, D) -> (BKV, T, D), each group's heads summed in order."""
        ...

    def split_heads(self, x: ArrayT, B: int, T: int, H: int) -> ArrayT:
        """(N, C) -> (BH, T, D)."""
        ...

    def merge_heads(self, x: ArrayT, B: int, H: int) -> ArrayT:
        """(BH, T, D) -> (N, C)."""
        ...

    def split_tokens(self, tokens: ArrayT) -> tuple[ArrayT, ArrayT, ArrayT]:
        """int64 (B, T+1) -> (inputs, targets, positions), each int64 (B*T,)."""
        ...


def contract_functions() -> tuple[str, ...]:
    """The names of the functions a backend module must provide, in the order of the contract."""
    return tuple(name for name, value in vars(Backend).items() if callable(value) and not name.startswith("_"))
