"""The triton backend's inputs and outputs: numpy arrays or device tensors, checked alike.

Every function of kernels/triton_backend.py takes numpy arrays (copied to the
device, the result copied back as numpy) or tensors already on the backend's
device (kept there), never a mix: `torch_mode` refuses a mix, `checkable`
shows kernels.validate a tensor's shape and dtype (so every backend refuses
the same inputs), and `to_caller` gives a result back in the kind of array
the caller passed.

Index tensors are checked on the host without reading them back: `to_device`
notes an int64 array's value range while it is still on the host
(`remember_range`), `split_tokens` passes it on to its slices, and
`index_checkable` / `check_range` check against the noted range.

The array type: `Arr` is a numpy array or a device tensor; a function typed
`(Arr, Arr) -> Arr` returns the kind it was given, so the triton backend is
a `Backend[torch.Tensor]` (kernels/backend_contract.py) that also accepts numpy.
"""

from __future__ import annotations

import weakref
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt
import torch

from kernels import KernelInputError
from kernels import triton_launch as L
from kernels.backend_contract import HostArray

# A numpy array or a device tensor; one call's array arguments are all of one kind (torch_mode).
Arr = TypeVar("Arr", npt.NDArray[Any], torch.Tensor)

# numpy's name for each torch dtype validate may be shown (others are refused as not float32)
_NUMPY_DTYPES = {
    t: np.dtype(n)
    for t, n in (
        (torch.float32, np.float32),
        (torch.float64, np.float64),
        (torch.float16, np.float16),
        (torch.int64, np.int64),
        (torch.int32, np.int32),
        (torch.int16, np.int16),
        (torch.int8, np.int8),
        (torch.uint8, np.uint8),
        (torch.bool, np.bool_),
    )
}


def check_tensor(x: torch.Tensor, name: str) -> None:
    """Refuse a tensor on another device or not contiguous."""
    if x.device.type != L.DEVICE.type:
        raise KernelInputError(f"{name} is on {x.device}, want {L.DEVICE.type} (the triton backend's device)")
    if not x.is_contiguous():
        raise KernelInputError(f"{name} is not contiguous (strides {tuple(x.stride())}), want a contiguous tensor")


def checkable(x: object, name: str) -> object:
    """What kernels.validate sees for `x`: numpy input itself; for a tensor, an array of its shape and dtype.

    Refuses tensors on another device or not contiguous.
    """
    if not isinstance(x, torch.Tensor):
        return x
    check_tensor(x, name)
    if x.dtype not in _NUMPY_DTYPES:
        raise KernelInputError(f"{name} has dtype {x.dtype}, want float32")
    return np.empty(tuple(x.shape), dtype=_NUMPY_DTYPES[x.dtype])  # never written or read: shape and dtype only


# ------------------------------------------------- index tensors, checked on the host

# id(tensor) -> (weak reference, tensor._version, lo, hi): int64 device tensors
# whose values are known to lie in [lo, hi] (lo > hi: empty) without reading
# them, because they were uploaded by to_device (range read from the numpy
# array) or cut from such a tensor by split_tokens. An in-place change bumps
# _version (shared by every view of a tensor) and the entry no longer counts.
_INDEX_RANGES: dict[int, tuple[weakref.ref[torch.Tensor], int, int, int]] = {}


def remember_range(t: torch.Tensor, lo: int, hi: int) -> None:
    """Note that every value of t lies in [lo, hi]."""
    key = id(t)

    def forget(ref: weakref.ref[torch.Tensor], key: int = key) -> None:
        entry = _INDEX_RANGES.get(key)
        if entry is not None and entry[0] is ref:
            del _INDEX_RANGES[key]

    _INDEX_RANGES[key] = (weakref.ref(t, forget), t._version, lo, hi)


def known_range(t: torch.Tensor) -> tuple[int, int] | None:
    """(lo, hi) noted for t or for the tensor t is a view of, if still unchanged; else None."""
    for cand in (t, t._base):
        entry = _INDEX_RANGES.get(id(cand)) if cand is not None else None
        if entry is not None and cand is not None and entry[0]() is cand and entry[1] == cand._version:
            return entry[2], entry[3]
    return None


def index_checkable(x: object, name: str) -> tuple[object, tuple[int, int] | None]:
    """(what kernels.validate sees for an index array `x`, its known value range or None).

    numpy input: itself. A device tensor with a known range: an all-zero
    stand-in of its shape (the range is checked by check_range); any other
    tensor: its values, copied to the host.
    """
    if not isinstance(x, torch.Tensor):
        return x, None
    check_tensor(x, name)
    known = known_range(x) if x.dtype == torch.int64 else None
    if known is None:
        return x.detach().cpu().numpy(), None
    return np.zeros(tuple(x.shape), dtype=np.int64), known


def check_range(known: tuple[int, int] | None, name: str, size: int) -> None:
    """Refuse a known index range that leaves [0, size)."""
    if known is not None and known[0] <= known[1] and (known[0] < 0 or known[1] >= size):
        raise KernelInputError(f"{name} holds values in [{known[0]}, {known[1]}], outside [0, {size})")


# ------------------------------------------------------------ kinds and transfers


def torch_mode(*arrays: object) -> bool:
    """True if the array arguments are torch tensors, False if numpy; refuses a mix."""
    kinds = {isinstance(a, torch.Tensor) for a in arrays}
    if len(kinds) > 1:
        raise KernelInputError("arguments mix numpy arrays and torch tensors, want all of one kind")
    return kinds == {True}


def device_tensor(x: HostArray | torch.Tensor) -> torch.Tensor:
    """A checked input as a device tensor (numpy arrays are copied to the device)."""
    if isinstance(x, torch.Tensor):
        return x.detach()
    return torch.from_numpy(x).to(L.DEVICE)


@overload
def to_caller(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor: ...


@overload
def to_caller(t: torch.Tensor, like: HostArray) -> HostArray: ...


def to_caller(t: torch.Tensor, like: torch.Tensor | HostArray) -> torch.Tensor | HostArray:
    """A result in the kind of `like` (the caller's first array): the tensor itself, or a numpy copy."""
    return t if isinstance(like, torch.Tensor) else t.cpu().numpy()
