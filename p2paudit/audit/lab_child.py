"""The process a lab run's steps are replayed in: the publisher's script runs here, and only here.

    python -m p2paudit.audit.lab_child REQUEST.json

audit.lab_isolation starts it and judges what it returns; nothing this process computes is trusted there
but the tensors and trace records it writes, which the parent digests and compares itself. So a script
that patches p2paudit, reads the verifier's memory or prints a verdict changes nothing the parent decides.

The request (JSON, written by the parent): the run directory, the task (the step to replay, or null to
rebuild state 0), whether the step keeps a value trace, the output directory, the parent's pid and the
file descriptor to report on (thread counts are the environment's, which it inherits). One task a
process: it writes into the output directory a checkpoint of the state it produced (run.checkpoint's
format: state 0 for the rebuild, n + 1 after step n) and `result.json`: {"names": the state's tensor
names, "ops": the step's trace records (ASCII JSON text each), "values": its value trace ([op name, hex
digest] each) or null, "error": null or [kind, one line]}; then it writes "done\\n" to the descriptor.
kind "input" is an InputError (a refusal of the lab mode, a bad checkpoint), "raised" anything else the
script or the mode raised (its traceback goes to this process's log).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import kernels
from p2paudit.errors import InputError
from p2paudit.lab import LabRun, LabScript, load_script, load_state
from p2paudit.run.checkpoint import save_checkpoint
from p2paudit.run.lab_format import SCRIPT_FILE
from p2paudit.run.lab_run import LabManifest, load_lab_state, read_lab_manifest

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when the parent that started it ends (Linux); gone already: exit now. `parent`
    0: started by bwrap (audit.lab_sandbox), whose --die-with-parent does this (and whose pids are its own)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent and os.getppid() != parent:
        os._exit(1)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300]


def _init(script: LabScript, m: LabManifest, out: Path) -> dict[str, Any]:
    model, opt = script.build()
    run = LabRun(model, opt, backend=m.backend, arithmetic=m.arithmetic_version)
    state = run.state_arrays()
    save_checkpoint(out, 0, state, run.initial)
    return {"names": sorted(state), "ops": None, "values": None}


def _step(script: LabScript, m: LabManifest, run_dir: Path, n: int, values: bool, out: Path) -> dict[str, Any]:
    model, opt = script.build()
    load_state(model, opt, load_lab_state(run_dir, m, n))
    run = LabRun(model, opt, backend=m.backend, arithmetic=m.arithmetic_version, first_step=n, values=values)
    with run.step(n):
        script.train_step(model, opt, script.batch(n))
    record = run.records[0]
    state = run.state_arrays()
    save_checkpoint(out, n + 1, state, record.state)
    kept = None if record.values is None else [[name, digest.hex()] for name, digest in record.values]
    return {"names": sorted(state), "ops": [r.decode("ascii") for r in record.ops], "values": kept}


def main(argv: list[str]) -> int:
    request = json.loads(Path(argv[0]).read_bytes())
    _die_with_parent(int(request["parent"]))
    run_dir, out, step = Path(request["run_dir"]), Path(request["out"]), request["step"]
    report = os.fdopen(int(request["report_fd"]), "w", buffering=1)
    result: dict[str, Any] = {"names": [], "ops": None, "values": None, "error": None}
    try:
        m = read_lab_manifest(run_dir)
        script = load_script(run_dir / SCRIPT_FILE, m.script_digest)
        kernels.standard_float_modes()
        if step is None:
            result.update(_init(script, m, out))
        else:
            result.update(_step(script, m, run_dir, int(step), bool(request["values"]), out))
    except InputError as exc:
        result["error"] = ["input", _one_line(exc)]
    except Exception as exc:  # the publisher's script (or the lab mode under it) raised
        traceback.print_exc()
        result["error"] = ["raised", f"{type(exc).__name__}: {_one_line(exc)}"]
    (out / "result.json").write_text(json.dumps(result))
    report.write("done\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
