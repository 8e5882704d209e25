"""The environment of a test process that runs numba's kernels compiled for the generic x86-64 CPU.

NUMBA_CPU_NAME=generic makes numba compile every kernel again (about a minute of CPU); with its own
cache directory, shared by every such test, that happens once per machine: scripts/test.sh compiles
the engine's kernels there before the tests start, beside (not after) the host's own compile. A
cache of its own, rather than the host's kernels/__pycache__, also keeps two processes from saving
entries of both kinds into one index at once (numba names a new entry's file by the index's length
when it saves, so two concurrent savers can pick the same file).
"""

from __future__ import annotations

from pathlib import Path

GENERIC_CACHE = Path(__file__).resolve().parent.parent / ".numba-generic"
GENERIC = {"NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": str(GENERIC_CACHE)}
