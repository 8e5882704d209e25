"""Who to tell when a cpu kernel is really being compiled (numba found no cached machine code for it).

A compile takes about a minute of CPU the first time on a machine, then
never again (every kernel is @njit(cache=True)), and a user who is not told
waits in silence. kernels never print: the caller sets a notice, and
kernels/cpu_compile_notice.py, listening to numba, calls `compiling_now`.
One slot, told once, then emptied. This module imports no numba, so setting
a notice costs nothing when the cpu backend is never loaded.
"""

from __future__ import annotations

from collections.abc import Callable

_notice: Callable[[], None] | None = None


def set_compile_notice(tell: Callable[[], None] | None) -> Callable[[], None] | None:
    """Call `tell()` (once) when a cpu kernel is next compiled rather than loaded from numba's cache; returns the
    notice it replaces. `tell` runs on the compiling thread, before the compile, and must not raise."""
    global _notice
    previous, _notice = _notice, tell
    return previous


def compiling_now() -> None:
    """Called as numba starts a compile (a cache miss): tells the notice set, once."""
    global _notice
    tell, _notice = _notice, None
    if tell is not None:
        tell()
