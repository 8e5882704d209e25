"""Keep freed memory in the process's heap, so that the next step's arrays reuse pages already mapped.

A step of the engine builds a new state (parameters and AdamW moments: three
arrays the size of the model) and frees the old one; torch updates in place.
With glibc's defaults every array over 32 MiB is its own mmap, unmapped when
freed, and its successor faults every page in again: on the 2-core VM of
docs/benchmarks.md that was about a third of a 125m step's CPU time at 256
tokens (the AdamW update measured 1.4 s a step against 0.35 s with the pages
already mapped). Here glibc serves large blocks from the heap and keeps freed
ones there (mallopt: no mmap for blocks, no trimming below 2 GiB of free top):
a long-running process keeps the peak it reached, which a replay reaches
every step anyway. Values are untouched. Elsewhere than glibc this does
nothing.

A process that goes idle after a step (a daemon with no step to replay)
gives those pages back with `release_freed_memory` (glibc's malloc_trim):
the next step faults them in again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from typing import Any

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_MAX = -4
_TRIM_BYTES = 2**31 - 1  # mallopt takes a C int

_done = False


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks for reuse (once per process); False where there is no glibc mallopt."""
    global _done
    if _done:
        return True
    mallopt = _libc_function("mallopt", (ctypes.c_int, ctypes.c_int))
    if mallopt is None:
        return False  # not glibc (musl has no mallopt): its defaults stay
    _done = bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, _TRIM_BYTES))
    return _done


def release_freed_memory() -> bool:
    """Give the heap's free pages back to the system (glibc's malloc_trim(0): the free top of the heap, and
    the whole pages of free blocks inside it); False where there is no glibc malloc_trim. Values of live
    arrays are untouched; the next step that needs the memory faults it in again."""
    trim = _libc_function("malloc_trim", (ctypes.c_size_t,))
    if trim is None:
        return False
    trim(0)
    return True


def _libc_function(name: str, argtypes: tuple[type, ...]) -> Any:  # noqa: ANN401 (a ctypes foreign function)
    """The C library's function `name` returning a C int, or None off Linux or where the library lacks it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function
