"""Between torch tensors and the kernels' numpy arrays, and the argument binding every table entry uses.

Preconditions: tensors are on the CPU (the numpy backends). `host` shares
memory with the tensor (a C-contiguous copy only when the tensor is strided);
`wrap` shares memory with the array. None of these runs a torch kernel that
computes a value: detach is a view, from_numpy and numpy() wrap memory, and
`host`'s copy of a strided tensor is torch's memory copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from p2paudit.lab.refusal import refused

F32 = np.float32
EXACT_INT = 2**24  # integers up to this magnitude convert to float32 exactly


def view(t: torch.Tensor) -> np.ndarray:
    """The tensor's memory as a numpy array (any strides; writing to it writes the tensor)."""
    return t.detach().numpy()


def host(t: torch.Tensor) -> np.ndarray:
    """The tensor's values as a C-contiguous numpy array (a copy only when it is strided).

    The copy is torch's (`contiguous`: a memory copy on every thread, vectorised; numpy's one-thread copy of
    an attention's transposed (B, H, T, D) view took three times as long). Inside a table entry the mode is
    not active, so the copy is neither traced nor looked up in the table: it computes no value."""
    a = view(t)
    if a.flags.c_contiguous:
        return a
    copied = t.detach().contiguous().numpy()
    return copied if copied.flags.c_contiguous else copied.copy(order="C")


def wrap(a: np.ndarray | np.generic) -> torch.Tensor:
    """A numpy result as a tensor (0-d stays 0-d)."""
    arr = np.asarray(a)
    if not arr.flags.c_contiguous:
        arr = arr.copy(order="C")
    if not arr.flags.writeable:
        arr = arr.copy()
    return torch.from_numpy(arr)


_SCHEMAS: dict[Any, tuple[tuple[str, Any], ...]] = {}


def _schema_of(func: Any) -> tuple[tuple[str, Any], ...]:
    """(name, default or None) of each argument of the op, read from its schema once per op."""
    known = _SCHEMAS.get(func)
    if known is None:
        known = tuple((a.name, a.default_value if a.has_default_value() else None) for a in func._schema.arguments)
        _SCHEMAS[func] = known
    return known


def bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The op's arguments by schema name, defaults filled in."""
    bound: dict[str, Any] = {}
    for i, (name, default) in enumerate(_schema_of(func)):
        if i < len(args):
            bound[name] = args[i]
        else:
            bound[name] = kwargs.get(name, default)
    return bound


def scalar32(name: str, value: object, what: str) -> np.float32:
    """A Python or 0-d scalar as the float32 the spec uses (section 1: rounded once from binary64)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise refused(name, f"{what} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        value = host(value).reshape(()).item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise refused(name, f"{what} must be a real number, got {type(value).__name__}")
    if isinstance(value, int) and abs(value) > EXACT_INT:
        raise refused(name, f"{what} {value} is not exactly a float32 (|n| > 2^24)")
    return F32(value)


def as_float32(name: str, a: np.ndarray) -> np.ndarray:
    """An operand of float arithmetic as float32: float32 as is, bool and small integers converted exactly."""
    if a.dtype == np.float32:
        return a
    if a.dtype == np.bool_:
        return a.astype(F32)
    if a.dtype.kind in "iu":
        if a.size and int(np.max(np.abs(a))) > EXACT_INT:
            raise refused(name, "an integer operand above 2^24 in float arithmetic (not exact in float32)")
        return a.astype(F32)
    raise refused(name, f"a {a.dtype} operand (op table 1 computes float32 values)")


def operand(name: str, x: object) -> np.ndarray | np.float32 | int:
    """A tensor as its numpy values, a Python number as float32 (floats) or int; anything else refused."""
    if isinstance(x, torch.Tensor):
        return view(x)
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return F32(x)
    raise refused(name, f"an operand of type {type(x).__name__}")


def dims_of(dim: object, ndim: int) -> tuple[int, ...]:
    """A dim argument (None, an int or a list; negatives allowed) as sorted non-negative axes; empty means all."""
    if dim is None:
        return tuple(range(ndim))
    items = [dim] if isinstance(dim, int) else list(dim)  # type: ignore[call-overload]
    if not items:
        return tuple(range(ndim))
    return tuple(sorted({d % max(ndim, 1) for d in items}))
