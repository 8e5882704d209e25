"""The process a lab run's steps are replayed in: the publisher's script runs here, and only here.

    python -m p2paudit.audit.lab_child REQUEST

audit.lab_isolation starts it and judges what it returns; nothing this process computes is trusted there
but the tensors and trace records it sends, which the parent digests and compares itself. So a script
that patches p2paudit, reads the verifier's memory or prints a verdict changes nothing the parent decides.

The request (JSON, the one argument): the run directory, the task (the step to replay, or null to rebuild
state 0), whether the step keeps a value trace, the parent's pid, the pipe to send on and the data memory
allowed (audit.lab_limits; thread counts are the environment's, which it inherits). Before anything of
the script runs, this process takes on its limits, which the script cannot lift. One task a process
(audit.lab_task runs it); on the pipe it sends the 8-byte little-endian length of a JSON result, the
result: {"names": the state's tensor names, "ops": the step's trace records (ASCII JSON text
each), "values": its value trace ([op name, hex digest] each) or null, "error": null or [kind, one line]},
and, with no error, the checkpoint of the state it produced (run.checkpoint's bytes: state 0 for the
rebuild, n + 1 after step n). Kind "input" is an InputError (a refusal of the lab mode, a bad checkpoint),
"raised" anything else the script or the mode raised (its traceback goes to this process's stderr).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import struct
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from p2paudit.audit.lab_task import run_task
from p2paudit.errors import InputError

_PR_SET_PDEATHSIG = 1
_NICE = 10


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when the parent that started it ends (Linux); gone already: exit now. `parent`
    0: started by bwrap (audit.lab_sandbox), whose --die-with-parent does this (and whose pids are its own)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent and os.getppid() != parent:
        os._exit(1)


def _confine(memory: int) -> None:
    """Limits the script cannot lift (a hard limit is lowered for good): its data memory; and the kernel's
    first choice to kill when memory runs out, and a lower priority, so the node beside it keeps going."""
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    try:
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass  # not Linux, or no /proc: the memory limit still holds
    os.nice(_NICE)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _send(fd: int, result: dict[str, Any], state: Iterable[bytes]) -> None:
    body = json.dumps(result).encode("ascii")
    with os.fdopen(fd, "wb") as pipe:
        pipe.write(struct.pack("<Q", len(body)) + body)
        for piece in state:
            pipe.write(piece)


def main(argv: list[str]) -> int:
    request = json.loads(argv[0])
    _die_with_parent(int(request["parent"]))
    _confine(int(request["memory"]))
    step = request["step"]
    result: dict[str, Any] = {"names": [], "ops": None, "values": None, "error": None}
    state: Iterable[bytes] = ()
    try:
        fields, state = run_task(Path(request["run_dir"]), None if step is None else int(step), bool(request["values"]))
        result.update(fields)
    except InputError as exc:
        result["error"] = ["input", _one_line(exc)]
    except MemoryError:  # past the limit _confine set: name it, and how to raise it
        traceback.print_exc()
        limit = int(request["memory"])
        result["error"] = ["raised", f"MemoryError: the step needs more than the {limit} bytes of data memory "
                                     f"it may use (P2PAUDIT_LAB_MEMORY, default this machine's memory)"]  # fmt: skip
    except Exception as exc:  # the publisher's script (or the lab mode under it) raised
        traceback.print_exc()
        result["error"] = ["raised", f"{type(exc).__name__}: {_one_line(exc)}"]
    _send(int(request["data_fd"]), result, state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
