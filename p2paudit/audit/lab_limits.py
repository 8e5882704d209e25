"""What a lab replay's child may use: time, memory and scratch space, from the environment.

A lab script is the publisher's code, and a daemon replays strangers' runs unattended: a script that
loops forever, allocates without end or fills a disk must cost the node one failed replay, not the node.

    P2PAUDIT_LAB_TIMEOUT   seconds a task (a step, or state 0's rebuild) may take; default 21600 (6 h: a
                           1B-parameter step takes about an hour on an ordinary machine). Past it the
                           child and everything it started are killed: LabChildRaised, exit 2.
    P2PAUDIT_LAB_MEMORY    the child's data memory (RLIMIT_DATA: its heap and anonymous mappings), bytes
                           or with a K, M, G or T suffix; default this machine's physical memory. Past it
                           an allocation fails in the script (MemoryError): LabChildRaised.
    P2PAUDIT_LAB_SCRATCH   the size of each of the sandbox's writable file systems (its /tmp, and the private
                           copies of the kernel caches on top of their own size), same units; default 512M.
                           Full: the write fails in the script (ENOSPC).

The state a child returns is bounded apart from these: by the size of the state its step starts from
(audit.lab_isolation). The child also asks the kernel to kill it first when memory runs out
(oom_score_adj 1000) and runs at a lower priority (nice 10), so the node around it stays responsive.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from p2paudit.errors import InputError
from p2paudit.sizes import parse_bytes, physical_memory

TIMEOUT_ENV = "P2PAUDIT_LAB_TIMEOUT"
MEMORY_ENV = "P2PAUDIT_LAB_MEMORY"
SCRATCH_ENV = "P2PAUDIT_LAB_SCRATCH"
DEFAULT_TIMEOUT_S = 6 * 3600.0
DEFAULT_SCRATCH_BYTES = 512 << 20


@dataclass(frozen=True)
class LabLimits:
    timeout_s: float
    memory_bytes: int
    scratch_bytes: int


def _seconds(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 10 * 365 * 86400:  # nan, inf, zero and negatives fail this too
        raise InputError(f"{name}={text!r}: want a positive number of seconds (21600 is 6 hours)")
    return value


def lab_limits() -> LabLimits:
    """The limits the environment sets (the module docstring); InputError, one line, for a malformed value."""
    timeout = os.environ.get(TIMEOUT_ENV, "")
    memory = os.environ.get(MEMORY_ENV, "")
    scratch = os.environ.get(SCRATCH_ENV, "")
    return LabLimits(
        timeout_s=_seconds(timeout, TIMEOUT_ENV) if timeout else DEFAULT_TIMEOUT_S,
        memory_bytes=parse_bytes(memory, MEMORY_ENV) if memory else physical_memory(),
        scratch_bytes=parse_bytes(scratch, SCRATCH_ENV) if scratch else DEFAULT_SCRATCH_BYTES,
    )
