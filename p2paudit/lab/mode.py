"""CanonicalMode: a TorchDispatchMode that runs every aten op of a step from op table 1, or refuses it by name.

Inside the mode, each operation reaching torch's dispatcher (forward,
autograd's backward, clip_grad_norm_, AdamW(fused=True)) is looked up in
p2paudit.lab.table: a TABLE entry computes it with the canonical kernels of
the backend (torch's kernel for it never runs), an EXACT entry lets torch do
a view, copy or comparison, and anything else raises LabOpRefused naming
the op. Tensors must be on the CPU and float32 (int64 and bool where the op
takes indices or masks); every op is appended to the step's dataflow trace.

Garbage is collected at pinned moments: the mode collects the youngest
generation on entry and after every op, and turns Python's automatic cyclic
GC off while it is active (a collection costs microseconds). Autograd steals
or copies a gradient by its reference count (AccumulateGrad: `aten.detach`,
or `aten.new_empty_strided` and `copy_`), and a reference cycle that a
library leaves inside an op (numba compiling a kernel on a cold cache keeps
the entry's frames, and so its outputs, alive) lasts until the GC runs; with
automatic collection that moment depended on the process's allocation
history, and so did the op graph (tests/lab/test_lab_trace.py).

Preconditions: one mode per step, entered on the thread that runs the step
(autograd's CPU backward runs there too).
"""

from __future__ import annotations

import gc
import types
from typing import Any

import numpy as np
import torch
from torch._C._dynamo import eval_frame  # Dynamo's frame strategies (_unwrap_dispatch)
from torch.utils._python_dispatch import TorchDispatchMode

from kernels import lab_math
from kernels.backend_contract import Backend
from kernels.cpu_float_modes import nonstandard_modes
from p2paudit.lab.context import OpContext
from p2paudit.lab.convert import bind
from p2paudit.lab.refusal import LabOpRefused, not_in_table, refused
from p2paudit.lab.table import EXACT, TABLE, VALUE_DTYPES, reason_for
from p2paudit.lab.trace import Tracer


def check_tensors(name: str, values: object, where: str) -> None:
    """Refuse a tensor of another dtype than float32, int64 or bool, or one off the CPU (in nested
    tuples, lists and dicts too)."""
    if isinstance(values, torch.Tensor):
        if values.dtype not in VALUE_DTYPES:
            raise refused(
                name,
                f"a {str(values.dtype).removeprefix('torch.')} tensor {where} (op table 1 computes float32 values; "
                "int64 and bool only as indices and masks)",
            )
        if not values.is_cpu:
            raise refused(name, f"a tensor on {values.device} {where} (this build's lab mode computes on the host)")
    elif isinstance(values, (list, tuple)):
        for v in values:
            check_tensors(name, v, where)
    elif isinstance(values, dict):
        for v in values.values():
            check_tensors(name, v, where)


def float_modes_on() -> str:
    """'' when this thread's floating-point control is the standard one; else what differs (flush-to-zero,
    denormals-are-zero, another rounding, unmasked exceptions: kernels/cpu_float_modes.py), which would
    change the canonical kernels' bits on this thread only."""
    return " and ".join(nonstandard_modes() or [])


_FLOAT_MODES_HINT = (
    "(torch.set_flush_denormal(True), fesetround or feenableexcept?): op table 1 rounds to nearest, keeps "
    "subnormals and masks exceptions (docs/arithmetic.md section 1)"
)

_NAMES: dict[Any, str] = {}  # overload -> "aten.add.Tensor": str() of an overload formats it anew each time


def name_of(func: Any) -> str:
    """The aten name of an overload, formatted once."""
    name = _NAMES.get(func)
    if name is None:
        name = _NAMES[func] = str(func)
    return name


class CanonicalMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Route every aten op to op table 1; record the step's trace in `tracer`.

    numpy's floating-point warnings are off while the mode is on (the table's
    values include inf and NaN wherever IEEE-754 gives them): set once here,
    not per op.
    """

    def __init__(self, be: Backend[Any], tracer: Tracer | None = None, math: types.ModuleType = lab_math) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ctx = OpContext(be, math)
        self.tracer = tracer if tracer is not None else Tracer()
        self.calls: dict[str, int] = {}
        self._gc_was_enabled = False
        self._quiet: list[Any] = []
        self._op = ""  # the op being dispatched (named by _check_input's refusals)

    def __enter__(self) -> CanonicalMode:
        modes = float_modes_on()
        if modes:
            raise LabOpRefused(f"a step with {modes} on in this thread is refused {_FLOAT_MODES_HINT}")
        # Whatever survives this is in an older generation, which nothing collects until the step ends: each
        # op's collection below sees only what the step allocated since the op before, whatever ran before it.
        gc.collect(0)
        quiet = np.errstate(all="ignore")
        quiet.__enter__()
        self._quiet.append(quiet)
        self._gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            super().__enter__()  # type: ignore[no-untyped-call]
        except BaseException:
            if self._gc_was_enabled:
                gc.enable()
            self._quiet.pop().__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            super().__exit__(*exc)  # type: ignore[no-untyped-call]
        finally:
            if self._gc_was_enabled:
                gc.enable()
            self._quiet.pop().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = name_of(func)
        entry = TABLE.get(name)
        if entry is None and name not in EXACT:
            raise not_in_table(name, reason_for(name))
        self._op = name
        seen = self.tracer.inputs(args, kwargs, self._check_input)  # every input tensor checked, then labelled
        if entry is not None:
            modes = float_modes_on()  # 1 us: the step's own code may have turned one on since the last op
            if modes:
                raise refused(name, f"{modes} is on in this thread {_FLOAT_MODES_HINT}")
            out = entry(self.ctx, name, bind(func, args, kwargs))
        else:
            check = EXACT[name]
            if check is not None:
                check(name, bind(func, args, kwargs))
            out = func(*args, **kwargs)
            check_tensors(name, out, "as output")
        self.calls[name] = self.calls.get(name, 0) + 1
        self.tracer.record(name, seen, args, out)
        gc.collect(0)  # the cycles this op left (and the frames they hold) go now, before autograd counts references
        return out

    def _check_input(self, x: object) -> None:
        """check_tensors of one input of the op now dispatched (a tensor, or a container of them)."""
        if not isinstance(x, torch.Tensor) or x.dtype not in VALUE_DTYPES or not x.is_cpu:
            check_tensors(self._op, x, "as input")


def _unwrap_dispatch() -> bool:
    """Run CanonicalMode's __torch_dispatch__ without torch's per-call wrapper where this torch allows.

    torch wraps a mode's __torch_dispatch__ so that Dynamo never traces it or anything it calls (a
    torch.compile'd function called inside a step would otherwise trace the table's Python and could run its
    ops as compiled kernels): the wrapper turns Dynamo off and on again around every op, 3 us of a ~20 us op.
    Here Dynamo is told once, by the method's code object, to skip that frame and every frame under it (the
    frame strategy SKIP, SKIP: the same guarantee), and the wrapper goes; a compiled function called in a
    step still runs eagerly through the table (tests/lab/test_lab_refusals.py). A torch without that API
    keeps its wrapper (False)."""
    raw = getattr(CanonicalMode.__dict__["__torch_dispatch__"], "__wrapped__", None)
    if raw is None or not hasattr(eval_frame, "set_code_exec_strategy"):
        return False
    skip = eval_frame._FrameExecStrategy(eval_frame._FrameAction.SKIP, eval_frame._FrameAction.SKIP)
    eval_frame.set_code_exec_strategy(raw.__code__, skip)
    CanonicalMode.__torch_dispatch__ = raw  # type: ignore[method-assign]
    return True


DISPATCH_UNWRAPPED = _unwrap_dispatch()
