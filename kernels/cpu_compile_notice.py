"""A cache miss of the cpu kernels, made known: numba's "numba:compile" event, passed to compile_notice.compiling_now.

numba fires "numba:compile" only when it compiles a function: a function it
loads from its on-disk cache (every kernel is @njit(cache=True)) fires
nothing. So the first run on a machine, or after an upgrade, hears of the
compile (about a minute) and later runs never do. kernels/cpu.py imports this
module, so the listener is in place before any kernel is first called.
"""

from __future__ import annotations

from typing import Any

from numba.core import event

from kernels import compile_notice


class _CompileListener(event.Listener):
    def on_start(self, ev: Any) -> None:
        compile_notice.compiling_now()

    def on_end(self, ev: Any) -> None:
        pass


event.register("numba:compile", _CompileListener())  # type: ignore[no-untyped-call]  # numba has no types
