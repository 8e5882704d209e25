"""What every table entry is given: the backend at the run's arithmetic version, and the attention cache."""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from kernels import lab_math
from kernels.backend_contract import Backend


@dataclass
class OpContext:
    """The backend (kernels.get_backend(name, arithmetic)), its lab functions and each attention output's p.

    `math` is the backend's module of kernels/lab_math.py's functions
    (lab_math.for_backend: lab_math itself on reference and cpu, kernels.triton_lab on triton).

    `attention` maps id(output tensor) -> (a weak reference to it, p): the
    backward of a causal attention takes its forward's p from here instead of
    recomputing it. Both ways give the same bits (the kernel is a pure
    function); the cache only saves the time.
    """

    be: Backend[Any]
    math: types.ModuleType = lab_math
    attention: dict[int, tuple[weakref.ref[torch.Tensor], np.ndarray]] = field(default_factory=dict)


Handler = Callable[[OpContext, str, dict[str, Any]], Any]
