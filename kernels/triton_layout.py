"""The triton backend's ops between kernels: transfers, exact layout changes, one-rounding + and /.

With these a whole training step stays on the device (kernels/__init__.py
lists them): `to_device` uploads a numpy array once (noting an int64 array's
value range for the index checks, kernels/triton_io.py), `to_host` copies a
result back, and `add`, `div_scalar`, `split_heads`, `merge_heads` and
`split_tokens` do the engine's work on device tensors with the bits of
kernels/numpy_layout.py. Given numpy arrays they are numpy_layout's.
kernels/triton_backend.py re-exports them.
"""

from __future__ import annotations

import numpy as np
import torch

from kernels import KernelInputError, numpy_layout, validate
from kernels import triton_io as io
from kernels import triton_launch as L
from kernels import triton_rows as tr
from kernels.backend_contract import HostArray, Scalar
from kernels.triton_io import Arr


def to_device(x: HostArray | torch.Tensor) -> torch.Tensor:
    """A host numpy array as a contiguous tensor on the backend's device (one copy).

    A tensor already on the device is returned as it is. For an int64 array
    the value range is read here, on the host, so index checks of the tensor
    (and of split_tokens' slices of it) need no copy back.
    """
    if isinstance(x, torch.Tensor):
        io.check_tensor(x, "x")
        return x
    if not isinstance(x, np.ndarray):
        raise KernelInputError(f"x is a {type(x).__name__}, want a numpy array or a device tensor")
    host = x if x.flags.c_contiguous and x.flags.writeable else x.copy(order="C")  # keeps 0-d arrays 0-d
    # (torch.from_numpy warns on a read-only array: copied on the host, not a transfer)
    t = torch.from_numpy(host).to(L.DEVICE, copy=True)
    if host.dtype == np.int64:
        lo, hi = (int(host.min()), int(host.max())) if host.size else (0, -1)
        io.remember_range(t, lo, hi)
    return t


def to_host(x: torch.Tensor | HostArray) -> HostArray:
    """A device tensor as a numpy array (one copy); numpy input is returned as np.asarray(x)."""
    if isinstance(x, torch.Tensor):
        host: HostArray = x.detach().cpu().numpy()
        return host
    return numpy_layout.to_host(x)


def add(a: Arr, b: Arr) -> Arr:
    """a + b, float32, rounded once: two device tensors of one shape (numpy input: the numpy sum)."""
    io.torch_mode(a, b)  # the kind check every entry point makes: refuses a mix
    if not isinstance(a, torch.Tensor):
        return numpy_layout.add(a, b)
    validate.check_pair(io.checkable(a, "a"), "a", io.checkable(b, "b"), "b")
    y = torch.empty_like(a)
    L.launch(tr.add_kernel, L.flat_grid(a.numel()), a, b, y, a.numel(), BLOCK=L.FLAT_BLOCK)
    return y


def div_scalar(x: Arr, d: Scalar) -> Arr:
    """x / float32(d), rounded once (div_rn), on a float32 device tensor (numpy input: the numpy quotient)."""
    io.torch_mode(x)  # the kind check every entry point makes
    if not isinstance(x, torch.Tensor):
        return numpy_layout.div_scalar(x, d)
    validate.check_elementwise(io.checkable(x, "x"))
    d32 = validate.to_float32(d, "d")
    y = torch.empty_like(x)
    L.launch(tr.divide_kernel, L.flat_grid(x.numel()), x, y, L.device_scalars(d32), x.numel(), BLOCK=L.FLAT_BLOCK)
    return y


def mul(a: Arr, b: Arr) -> Arr:
    """a * b, float32, rounded once: two device tensors of one shape (numpy input: numpy_layout.mul)."""
    io.torch_mode(a, b)  # the kind check every entry point makes: refuses a mix
    if not isinstance(a, torch.Tensor):
        return numpy_layout.mul(a, b)
    validate.check_pair(io.checkable(a, "a"), "a", io.checkable(b, "b"), "b")
    y = torch.empty_like(a)
    L.launch(tr.mul_kernel, L.flat_grid(a.numel()), a, b, y, a.numel(), BLOCK=L.FLAT_BLOCK)
    return y


def rope(x: Arr, cos: Arr, sin: Arr) -> Arr:
    """Rotary positions with numpy_layout.rope's bits: x (BH, T, D), cos and sin (T, D/2) on the device."""
    io.torch_mode(x, cos, sin)  # the kind check every entry point makes: refuses a mix
    if not isinstance(x, torch.Tensor):
        return numpy_layout.rope(x, cos, sin)
    _, t, d = validate.check_rope(io.checkable(x, "x"), io.checkable(cos, "cos"), io.checkable(sin, "sin"))
    y = torch.empty_like(x)
    L.launch(tr.rope_kernel, L.flat_grid(x.numel()), x, cos, sin, y, x.numel(), t, d, BLOCK=L.FLAT_BLOCK)
    return y


def repeat_heads(x: Arr, groups: int) -> Arr:
    """(BKV, T, D) -> (BKV * groups, T, D), each head copied `groups` times in a row (exact, on the device)."""
    io.torch_mode(x)  # the kind check every entry point makes
    if not isinstance(x, torch.Tensor):
        return numpy_layout.repeat_heads(x, groups)
    validate.check_head_groups(io.checkable(x, "x"), groups, summing=False)
    return x.repeat_interleave(groups, dim=0)


def sum_head_groups(x: Arr, groups: int) -> Arr:
    """(BKV * groups, T, D) -> (BKV, T, D): each run of `groups` heads summed left to right (add's roundings)."""
    io.torch_mode(x)  # the kind check every entry point makes
    if not isinstance(x, torch.Tensor):
        return numpy_layout.sum_head_groups(x, groups)
    rows, t, d, g = validate.check_head_groups(io.checkable(x, "x"), groups, summing=True)
    parts = x.reshape(rows // g, g, t, d)
    total = parts[:, 0].contiguous()
    for i in range(1, g):
        total = add(total, parts[:, i].contiguous())
    return total


def split_heads(x: Arr, B: int, T: int, H: int) -> Arr:
    """(N, C) -> (BH, T, D), contiguous: head h of sequence b is row b*H + h (an exact copy on the device)."""
    io.torch_mode(x)  # the kind check every entry point makes
    if not isinstance(x, torch.Tensor):
        return numpy_layout.split_heads(x, B, T, H)
    io.check_tensor(x, "x")
    D = x.shape[1] // H
    return x.reshape(B, T, H, D).permute(0, 2, 1, 3).contiguous().reshape(B * H, T, D)


def merge_heads(x: Arr, B: int, H: int) -> Arr:
    """(BH, T, D) -> (N, C), the inverse of split_heads (an exact copy on the device)."""
    io.torch_mode(x)  # the kind check every entry point makes
    if not isinstance(x, torch.Tensor):
        return numpy_layout.merge_heads(x, B, H)
    io.check_tensor(x, "x")
    _, T, D = x.shape
    return x.reshape(B, H, T, D).permute(0, 2, 1, 3).contiguous().reshape(B * T, H * D)


def split_tokens(tokens: Arr) -> tuple[Arr, Arr, Arr]:
    """int64 tokens (B, T+1) -> (inputs, targets, positions), each int64 (B*T,), on the device.

    inputs = tokens[:, :-1] and targets = tokens[:, 1:] inherit the value range
    noted for tokens (by to_device); positions are 0..T-1 repeated B times.
    """
    io.torch_mode(tokens)  # the kind check every entry point makes
    if not isinstance(tokens, torch.Tensor):
        return numpy_layout.split_tokens(tokens)
    io.check_tensor(tokens, "tokens")
    B, T = tokens.shape[0], tokens.shape[1] - 1
    idx = tokens[:, :-1].contiguous().reshape(B * T)
    targets = tokens[:, 1:].contiguous().reshape(B * T)
    pos = torch.arange(T, dtype=torch.int64, device=tokens.device).repeat(B)
    known = io.known_range(tokens)
    if known is not None:
        io.remember_range(idx, *known)
        io.remember_range(targets, *known)
    io.remember_range(pos, 0, T - 1)
    return idx, targets, pos
