"""What every table entry is given: the backend at the run's arithmetic version, and the attention cache."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from kernels.backend_contract import Backend


@dataclass
class OpContext:
    """The backend (kernels.get_backend(name, arithmetic)) and the probabilities each attention output keeps.

    `attention` maps id(output tensor) -> (a weak reference to it, p): the
    backward of a causal attention takes its forward's p from here instead of
    recomputing it. Both ways give the same bits (the kernel is a pure
    function); the cache only saves the time.
    """

    be: Backend[Any]
    attention: dict[int, tuple[weakref.ref[torch.Tensor], np.ndarray]] = field(default_factory=dict)


Handler = Callable[[OpContext, str, dict[str, Any]], Any]
