"""A lab run's replay in a child process (audit.lab_child), judged here: the publisher's script never runs in
the process that decides its verdict.

A lab script is the publisher's Python. Run in the verifier's own process it could rewrite the verifier
(patch the comparison, read the claims out of a caller's frame) and make a forged run "match"; here it
runs in a child, which returns the state it produced (a checkpoint file) and the step's trace records,
and this process digests the state's tensors and the records itself (run.checkpoint.digest_checkpoint,
lab.trace.digest_records). What the child writes is untrusted input: its size is bounded, its fields
checked, a malformed result is an InputError (one line), never a verdict.

The child runs in a sandbox (audit.lab_sandbox: no network, of the run only the files the replay reads),
so it cannot read the claimed checkpoint of the state after its step, nor fetch it, and return it as its
own. docs/lab-mode.md, "What a lab match proves", says what is left.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import p2paudit
from p2paudit.audit.lab_sandbox import sandbox_off, sandboxed
from p2paudit.errors import InputError
from p2paudit.lab.warm import warm_kernels
from p2paudit.run.checkpoint import checkpoint_path, digest_checkpoint
from p2paudit.run.digest import StateDigest
from p2paudit.run.lab_format import SCRIPT_FILE
from p2paudit.run.lab_run import LabRunView
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE
from p2paudit.run.storage import read_file, read_tail

logger = logging.getLogger(__name__)
MAX_RESULT_BYTES = 256 << 20  # a result's trace records (run.lab_run's MAX_TRACE_FILE is the claim's bound)
_LOG_TAIL = 4096


class LabChildRaised(InputError):
    """The replay's child process reported that the publisher's script (or the lab mode under it) raised, or
    it ended before reporting: not a finding about the run, and nothing is signed (exit 2, one line)."""


@dataclass(frozen=True)
class ChildOutput:
    """What the child produced for one task: the state (digested here), its trace records and value trace."""

    state: StateDigest
    ops: list[bytes]
    values: list[tuple[str, bytes]] | None


def _package_root() -> str:
    return str(Path(p2paudit.__file__).resolve().parents[1])


def _tail_of(log: Path) -> str:
    """The last _LOG_TAIL bytes the child wrote to its log ('' if the file is gone or is not the regular file
    this process made: the child may have replaced it with a link or a device)."""
    try:
        return read_tail(log, "lab replay log", _LOG_TAIL, log.parent).decode("utf-8", "replace")
    except InputError:
        return ""


def _log_child(log: Path) -> None:
    """The end of what the replay's process wrote (the traceback of what raised), into this process's log."""
    logger.warning("the lab replay's process wrote (its last %d bytes):\n%s", _LOG_TAIL, _tail_of(log))


def _log_tail(log: Path) -> str:
    """The last line of the child's log, one line of at most 300 characters."""
    lines = _tail_of(log).strip().splitlines()
    return " ".join(lines[-1].split())[:300] if lines else ""


def _result(out: Path, where: str) -> tuple[list[str], list[bytes], list[tuple[str, bytes]] | None]:
    """(state tensor names, trace records, value trace) the child wrote; InputError or LabChildRaised for an error it
    reports; InputError for a result that is not one."""
    blob = read_file(out / "result.json", f"{where}: its result", MAX_RESULT_BYTES, out)
    try:
        body = json.loads(blob)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{where}: its result is not JSON ({type(exc).__name__})") from None
    if not isinstance(body, dict) or set(body) != {"names", "ops", "values", "error"}:
        raise InputError(f"{where}: its result is not a map of names, ops, values and error")
    error = body["error"]
    if error is not None:
        if not (isinstance(error, list) and len(error) == 2 and all(isinstance(e, str) for e in error)):
            raise InputError(f"{where}: its error is not [kind, message]")
        message = " ".join(error[1].split())[:300]
        if error[0] == "input":
            raise InputError(message)
        _log_child(out / "child.log")
        raise LabChildRaised(f"the lab replay raised {message} (the publisher's script or the lab mode)")
    names, ops, values = body["names"], body["ops"] or [], body["values"]
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        raise InputError(f"{where}: its state's tensor names are not a list of strings")
    if not (isinstance(ops, list) and all(isinstance(r, str) for r in ops)):
        raise InputError(f"{where}: its trace records are not a list of strings")
    if values is not None:
        if not (isinstance(values, list) and all(_is_value(v) for v in values)):
            raise InputError(f"{where}: its value trace is not a list of [op name, 64 hex digits]")
        values = [(v[0], bytes.fromhex(v[1])) for v in values]
    return names, [r.encode("utf-8") for r in ops], values


def _is_value(v: object) -> bool:
    return (
        isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], str)
        and re.fullmatch(r"[0-9a-f]{64}", v[1]) is not None
    )  # fmt: skip


def replay_in_child(view: LabRunView, init: bool, steps: range) -> Iterator[tuple[int | None, ChildOutput]]:
    """(None for state 0's rebuild, then each step n; what a child produced for it), each as soon as it is
    made. Each task has a child of its own: sandboxed, the rebuild of state 0 sees no checkpoint and step
    n's replay only checkpoint n, so none can read the state it is to compute (step n + 1's start is step
    n's claim). A child is killed when the caller stops iterating early."""
    sandboxed_child = not sandbox_off()
    if sandboxed_child and view.claims.backend == "cpu":
        warm_kernels(view.claims.arithmetic_version)  # into the cache the children's private copies are made of
    for task in ([None] if init else []) + list(steps):
        yield task, _replay_one(view, task, sandboxed_child)


def _replay_one(view: LabRunView, task: int | None, sandboxed_child: bool) -> ChildOutput:
    """State 0 rebuilt (task None) or step `task` replayed in a child process, its output checked and digested."""
    what = "state 0" if task is None else f"step {task}"
    steps = [] if task is None else [task]
    with tempfile.TemporaryDirectory(prefix="p2paudit-lab-replay-") as scratch:
        out = Path(scratch)
        read_end, write_end = os.pipe()
        request = {
            "run_dir": str(view.run_dir.resolve()), "step": task,
            "values": task is not None and view.claims.values[task] is not None, "out": str(out),
            "parent": 0 if sandboxed_child else os.getpid(), "report_fd": write_end,
        }  # fmt: skip
        (out / "request.json").write_text(json.dumps(request))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
        log = out / "child.log"
        command = [sys.executable, "-m", "p2paudit.audit.lab_child", str(out / "request.json")]
        if sandboxed_child:
            files = [view.run_dir / name for name in (MANIFEST_FILE, SIGNATURE_FILE, SCRIPT_FILE)]
            files += [view.run_dir / checkpoint_path(n) for n in steps]  # the step's start: nothing after it
            command = sandboxed(command, view.run_dir, files, out, out)
        with log.open("wb") as log_file:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, pass_fds=(write_end,), env=env,
            )  # fmt: skip
        os.close(write_end)
        try:
            with os.fdopen(read_end, "rb") as reports:
                if reports.readline(32).strip() != b"done":
                    code = proc.wait()
                    _log_child(log)
                    tail = _log_tail(log)
                    raise LabChildRaised(
                        f"the lab replay's process ended (exit {code}) before its result for {what}"
                        f"{f': {tail}' if tail else ''}"
                    )
                names, ops, values = _result(out, f"the lab replay of {what}")
                state = digest_checkpoint(out, 0 if task is None else task + 1, names)
                return ChildOutput(state, ops, values)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
