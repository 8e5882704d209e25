"""Which kernel backend runs a step, and the single-process step function built on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import kernels
from kernels.backend_contract import Backend
from kernels.compile_notice import set_compile_notice
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.step import StepResult, train_step
from p2paudit.errors import InputError


def load_backend(name: str, arithmetic: int) -> Backend[Any]:
    """The kernel backend `name` at arithmetic version `arithmetic` (the run's: its manifest names it);
    InputError if it cannot run here (e.g. triton without CUDA)."""
    try:
        return kernels.get_backend(name, arithmetic)
    except ImportError as exc:
        raise InputError(f"backend {name} is not available here: {exc}") from None


def single_process_step(cfg: TrainConfig, backend_name: str, arithmetic: int) -> Callable[..., StepResult]:
    """step_fn(state, batch, trace=None, *, progress=None) -> StepResult on one process with the named backend
    at arithmetic version `arithmetic`."""
    backend = load_backend(backend_name, arithmetic)
    return lambda state, batch, trace=None, *, progress=None: train_step(
        state, batch, cfg, backend, trace, progress=progress
    )


@contextmanager
def compile_notice(tell: Callable[[], None]) -> Iterator[None]:
    """Within the block, call `tell()` once if a cpu kernel is compiled rather than loaded from numba's cache.

    The first run on a machine compiles the cpu kernels (about a minute of CPU); later runs load them.
    """
    previous = set_compile_notice(tell)
    try:
        yield
    finally:
        set_compile_notice(previous)
