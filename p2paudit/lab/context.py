"""What every table entry is given: the backend at the run's arithmetic version, and the attention cache."""

from __future__ import annotations

import os
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from kernels import lab_math
from kernels.backend_contract import Backend
from p2paudit.sizes import parse_bytes, physical_memory

ATTENTION_CACHE_ENV = "P2PAUDIT_LAB_ATTENTION_CACHE"
TensorKey = tuple[int, tuple[int, ...], tuple[int, ...], int]


def tensor_key(t: torch.Tensor) -> TensorKey:
    """Where a tensor's values are: its memory, shape and strides, and its version counter (bumped by any
    in-place write to it or a view of it). Two live tensors with one key hold the same values."""
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t._version)


@dataclass(frozen=True)
class SavedAttention:
    """One causal attention's p (B*H, T, T), and the q, k and output it came with: held, so that their memory
    cannot be handed to another tensor (and their keys mean them) while the entry lives."""

    tensors: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    p: np.ndarray


def attention_cache_budget() -> int | None:
    """The bytes of attention probabilities a step may keep for its backward: P2PAUDIT_LAB_ATTENTION_CACHE
    (a size: "4G"; 0 keeps none); None where it is unset: the mode chooses (OpContext.keeps_attention).
    InputError (one line) for a malformed value. It changes the step's time and memory, never its bits."""
    text = os.environ.get(ATTENTION_CACHE_ENV, "")
    return parse_bytes(text, ATTENTION_CACHE_ENV, allow_zero=True) if text else None


def on_cpu_backend(be: Backend[Any]) -> tuple[bool, bool]:
    """(whether `be` is the cpu backend, whether at arithmetic version 2): read from the name of the module or
    of its version view, which kernels/versions.py calls "<module>@v<version>"."""
    module, _, version = str(getattr(be, "__name__", "")).partition("@v")
    return module == "kernels.cpu", version == "2"


@dataclass
class OpContext:
    """The backend (kernels.get_backend(name, arithmetic)), its lab functions and each attention output's p.

    `math` is the backend's module of kernels/lab_math.py's functions
    (lab_math.for_backend: lab_math itself on reference, kernels.cpu_lab_math on cpu, kernels.triton_lab on
    triton).

    `cpu` (with `fused`, its arithmetic version 2): the backend is kernels.cpu,
    so the entries with a fused kernel in kernels/cpu_lab.py call it: one pass
    instead of the composition, the same bits.

    `attention` maps the keys of (q, k, output) of a forward to its p: the
    backward of a causal attention, given the same q and k (p is a function
    of them alone), takes its forward's p from here instead of recomputing
    it. Both ways give the same bits (the kernel is a pure function); the
    cache only saves the time. The key is not the tensors' id: autograd hands
    the backward other tensor objects over the same memory. It holds at most
    `attention_budget` bytes of p (attention_cache_budget(): P2PAUDIT_LAB_ATTENTION_CACHE);
    a forward past that keeps none, and its backward recomputes p (p is
    B*H*T*T floats a layer). Where the variable is unset (None), the mode
    chooses: on cpu a forward keeps none (the step whose backward recomputes
    p a block of rows at a time took no longer than the one keeping every p,
    and holds no T x T array: docs/benchmarks.md, stop 40); on the other
    backends, whose backward needs p whole, up to a quarter of this
    machine's memory.
    """

    be: Backend[Any]
    math: types.ModuleType = lab_math
    attention: dict[tuple[TensorKey, TensorKey, TensorKey], SavedAttention] = field(default_factory=dict)
    attention_budget: int | None = field(default_factory=attention_cache_budget)
    attention_kept: int = field(init=False, default=0)  # bytes of p in `attention`
    cpu: bool = field(init=False)
    fused: bool = field(init=False)

    def __post_init__(self) -> None:
        self.cpu, self.fused = on_cpu_backend(self.be)

    def keeps_attention(self, q: torch.Tensor, k: torch.Tensor, nbytes: int) -> bool:
        """Whether a forward of q and k with `nbytes` of p keeps it: not inference tensors, and within the
        budget; with none set, never on cpu (its backward recomputes p a block of rows at a time), else
        within a quarter of physical memory. A forward that keeps none need not make p whole: on cpu it
        never does."""
        if not _keyed(q, k) or (self.attention_budget is None and self.cpu):
            return False
        return self.attention_kept + nbytes <= self._budget()

    def save_attention(self, q: torch.Tensor, k: torch.Tensor, out: torch.Tensor, p: np.ndarray) -> None:
        """Keep p for the backward of the attention that made `out` from q and k (not for inference tensors,
        which have no version counter: a backward of theirs recomputes p), within the budget."""
        if not _keyed(q, k, out) or self.attention_kept + p.nbytes > self._budget():
            return
        self.attention[(tensor_key(q), tensor_key(k), tensor_key(out))] = SavedAttention((q, k, out), p)
        self.attention_kept += p.nbytes

    def _budget(self) -> int:
        return physical_memory() // 4 if self.attention_budget is None else self.attention_budget

    def take_attention(self, q: torch.Tensor, k: torch.Tensor, out: torch.Tensor) -> np.ndarray | None:
        """The p saved for (q, k, out), removed from the cache; None when the forward was not seen."""
        if not _keyed(q, k, out):
            return None
        saved = self.attention.pop((tensor_key(q), tensor_key(k), tensor_key(out)), None)
        if saved is None:
            return None
        self.attention_kept -= saved.p.nbytes
        return saved.p


def _keyed(*tensors: torch.Tensor) -> bool:
    return not any(t.is_inference() for t in tensors)


Handler = Callable[[OpContext, str, dict[str, Any]], Any]
