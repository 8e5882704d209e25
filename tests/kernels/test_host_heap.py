"""kernels.host_heap: after get_backend("cpu"), a large array lives in the heap (reused when freed), not its own mmap."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import sys
    import numpy as np
    import kernels
    if sys.argv[1] == "backend":
        kernels.get_backend("cpu", 2)
    a = np.ones(2**25, np.float32)  # 128 MiB: over glibc's largest mmap threshold
    address = a.ctypes.data
    for line in open("/proc/self/maps"):
        span, *rest = line.split()
        lo, hi = (int(x, 16) for x in span.split("-"))
        if lo <= address < hi:
            print(rest[-1] if len(rest) >= 5 else "anonymous")
    """
)


def _region(mode: str) -> str:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc/self/maps")
def test_large_arrays_come_from_the_heap_once_a_host_backend_is_taken():
    assert _region("plain") != "[heap]"  # the baseline: glibc maps a 128 MiB block on its own
    assert _region("backend") == "[heap]"


RELEASE_PROBE = textwrap.dedent(
    """
    import numpy as np
    import kernels
    from kernels.host_heap import release_freed_memory

    def resident_mib():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 // 2**20

    kernels.get_backend("cpu", 2)
    arrays = [np.ones(2**26, np.float32) for _ in range(4)]  # a step's 1 GiB, from the heap
    del arrays
    kept = resident_mib()
    released = release_freed_memory()
    print(kept, resident_mib(), released)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc/self/statm")
def test_an_idle_process_gives_the_freed_heap_back():
    """The heap keeps a step's freed GiB (so the next step reuses its pages); release_freed_memory, which a
    daemon calls when it goes idle, gives it back."""
    out = subprocess.run([sys.executable, "-c", RELEASE_PROBE], capture_output=True, text=True, check=True, timeout=120)
    kept, after, released = out.stdout.split()
    assert released == "True"
    assert int(kept) > 1000 and int(after) < int(kept) - 900, out.stdout
