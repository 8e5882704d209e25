"""Context managers that change the calling thread's floating-point control word for a test, and put it back.

`flushing_denormals()`: torch.set_flush_denormal(True) (MXCSR's flush-to-zero and denormals-are-zero).
`rounding(mode)`: C's fesetround (0xC00 toward zero, 0x400 toward -inf, 0x800 toward +inf).
Each skips the test where the processor is not x86-64 or the mode cannot be set.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from collections.abc import Iterator

import pytest
import torch

from kernels.cpu_float_modes import X86


@contextlib.contextmanager
def flushing_denormals() -> Iterator[None]:
    if not X86 or not torch.set_flush_denormal(True):
        pytest.skip("flush-to-zero is x86's MXCSR here")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@contextlib.contextmanager
def rounding(mode: int) -> Iterator[None]:
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    if not X86 or libm.fesetround(mode) != 0:
        pytest.skip("fesetround's x86 modes are not available here")
    try:
        yield
    finally:
        libm.fesetround(0)
