"""Whether a process still runs (a leaf module: standard library only)."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """True if process `pid` exists (this one included), even when it belongs to another user."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
