"""A lab run's replay in a child process (audit.lab_child), judged here: the publisher's script never runs in
the process that decides its verdict.

A lab script is the publisher's Python. Run in the verifier's own process it could rewrite the verifier
(patch the comparison, read the claims out of a caller's frame) and make a forged run "match"; here it
runs in a child, which sends the state it produced (checkpoint bytes) and the step's trace records over a
pipe, and this process digests the state's tensors as they arrive, writing none of them
(run.checkpoint_stream), and the records itself (lab.trace.digest_records). What the child sends is
untrusted input: the result's length and the state's are bounded (the state by the size of the one its
step starts from: a step changes no shape), its fields checked, a malformed result is an InputError (one
line), never a verdict; a child that runs past its time (audit.lab_limits) is killed.

The child runs in a sandbox (audit.lab_sandbox: no network, of the run only the files the replay reads),
so it cannot read the claimed checkpoint of the state after its step, nor fetch it, and return it as its
own. docs/lab-mode.md, "What a lab match proves", says what is left.
"""

from __future__ import annotations

import json
import logging
import os
import re
import selectors
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import p2paudit
from p2paudit.audit.lab_limits import TIMEOUT_ENV, lab_limits
from p2paudit.audit.lab_sandbox import sandbox_off, sandboxed
from p2paudit.errors import InputError
from p2paudit.lab.warm import warm_kernels
from p2paudit.run.checkpoint import checkpoint_bound, checkpoint_path, open_checkpoint
from p2paudit.run.checkpoint_layout import MAX_STATE_TENSORS
from p2paudit.run.checkpoint_stream import CheckpointStream
from p2paudit.run.digest import StateDigest
from p2paudit.run.lab_format import SCRIPT_FILE
from p2paudit.run.lab_run import MAX_TRACE_FILE, LabRunView, lab_batch_path
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE
from p2paudit.run.storage import parse_json
from p2paudit.run.traces import MAX_TRACE_STRUCTURE

logger = logging.getLogger(__name__)
# A result holds a step's trace records and value trace, as a trace file does: past a trace file's bounds
# (run.lab_run, run.traces) it could match no claim; the structure bound keeps its parse small (run.storage)
MAX_RESULT_BYTES = 2 * MAX_TRACE_FILE
MAX_RESULT_STRUCTURE = MAX_TRACE_STRUCTURE + (1 << 20)
_LOG_TAIL = 4096
_CHUNK = 1 << 20
_LAST_READS = 64  # of the log, once the pipe has ended
_EXIT_WAIT_S = 10.0  # for the exit code of a child whose pipe ended before its result


class LabChildRaised(InputError):
    """The replay's child process reported that the publisher's script (or the lab mode under it) raised, or
    it ended before reporting, or ran past its time: not a finding about the run, and nothing is signed
    (exit 2, one line)."""


@dataclass(frozen=True)
class ChildOutput:
    """What the child produced for one task: the state (digested here), its trace records and value trace."""

    state: StateDigest
    ops: list[bytes]
    values: list[tuple[str, bytes]] | None


def _package_root() -> str:
    return str(Path(p2paudit.__file__).resolve().parents[1])


def _last_line(tail: bytes | bytearray) -> str:
    """The last line of what the child wrote, one line of at most 300 characters."""
    lines = tail.decode("utf-8", "replace").strip().splitlines()
    return " ".join(lines[-1].split())[:300] if lines else ""


def _log_child(tail: bytes | bytearray) -> None:
    """The end of what the replay's process wrote (the traceback of what raised), into this process's log."""
    logger.warning(
        "the lab replay's process wrote (its last %d bytes):\n%s", _LOG_TAIL, tail.decode("utf-8", "replace")
    )


def _names(names: object, where: str) -> list[str]:
    if not (isinstance(names, list) and names and all(isinstance(n, str) for n in names)):
        raise InputError(f"{where}: its state's tensor names are not a list of strings")
    if len(names) > MAX_STATE_TENSORS:  # run.checkpoint_layout: each lets its header be 256 bytes longer
        raise InputError(f"{where}: its state has {len(names)} tensors, more than the {MAX_STATE_TENSORS} allowed")
    if len(set(names)) != len(names):  # each would be digested twice, and widen the header's bound
        raise InputError(f"{where}: its state's tensor names are not distinct")
    return names


def _result(body: object, where: str, tail: bytes) -> tuple[list[bytes], list[tuple[str, bytes]] | None]:
    """(trace records, value trace) of the result the child sent (parsed JSON); InputError or
    LabChildRaised for an error it reports (`tail`: the end of its log, logged for the latter); InputError
    for a result that is not one."""
    if not isinstance(body, dict) or set(body) != {"names", "ops", "values", "error"}:
        raise InputError(f"{where}: its result is not a map of names, ops, values and error")
    error = body["error"]
    if error is not None:
        if not (isinstance(error, list) and len(error) == 2 and all(isinstance(e, str) for e in error)):
            raise InputError(f"{where}: its error is not [kind, message]")
        message = " ".join(error[1].split())[:300]
        if error[0] == "input":
            raise InputError(message)
        _log_child(tail)
        raise LabChildRaised(f"the lab replay raised {message} (the publisher's script or the lab mode)")
    _names(body["names"], where)
    ops, values = body["ops"] or [], body["values"]
    if not (isinstance(ops, list) and all(isinstance(r, str) for r in ops)):
        raise InputError(f"{where}: its trace records are not a list of strings")
    if values is not None:
        if not (isinstance(values, list) and all(_is_value(v) for v in values)):
            raise InputError(f"{where}: its value trace is not a list of [op name, 64 hex digits]")
        values = [(v[0], bytes.fromhex(v[1])) for v in values]
    return [r.encode("utf-8") for r in ops], values


class _Received:
    """What the child sent on its pipe, parsed as it arrives: the result's length (8 bytes, little-endian),
    the result (JSON), then the state's checkpoint bytes, digested as they come (run.checkpoint_stream),
    never written: refused past `bound` (bytes, and what sets them), and where the result names no state."""

    def __init__(self, produced: int, bound: tuple[int, str], where: str) -> None:
        self._head = bytearray()
        self._length: int | None = None
        self._body = bytearray()
        self._produced, self._bound, self._where = produced, bound, where
        self.parsed: object = None  # the result, once all of it came
        self._complete = False
        self._state: CheckpointStream | None = None

    def feed(self, chunk: bytes) -> None:
        if self._length is None:
            take = 8 - len(self._head)
            self._head += chunk[:take]
            chunk = chunk[take:]
            if len(self._head) < 8:
                return
            (self._length,) = struct.unpack("<Q", self._head)
            if self._length > MAX_RESULT_BYTES:
                raise InputError(f"{self._where}: its result has {self._length} bytes, more than {MAX_RESULT_BYTES}")
        if not self._complete:
            take = self._length - len(self._body)
            self._body += chunk[:take]
            chunk = chunk[take:]
            if len(self._body) == self._length:
                self._parse()
        if chunk:
            if self._state is None:
                raise InputError(f"{self._where}: it sent a state after a result that names no state")
            self._state.feed(chunk)

    def _parse(self) -> None:
        self.parsed = parse_json(bytes(self._body), f"{self._where}: its result", MAX_RESULT_STRUCTURE)
        del self._body[:]
        self._complete = True
        if isinstance(self.parsed, dict) and self.parsed.get("error") is None:
            names = _names(self.parsed.get("names"), self._where)
            self._state = CheckpointStream(self._produced, names, *self._bound, f"{self._where}: its state")

    def complete(self) -> bool:
        """Whether the whole result came."""
        return self._complete

    def done(self) -> bool:
        """Whether all of it came: the result, and the whole state it names (none after an error)."""
        return self._complete and (self._state is None or self._state.done())

    def state(self) -> StateDigest:
        """The digest of the state it sent (InputError if the state ended early)."""
        if self._state is None:
            raise InputError(f"{self._where}: its result names no state")
        return self._state.finish()


def _receive(data: int, log: int, received: _Received, timeout_s: float, where: str) -> bytearray:
    """Read the child's pipe into `received`, and its log (its last _LOG_TAIL bytes, returned), until all of
    the result and state came or the pipe ends; LabChildRaised after `timeout_s`. Neither the child's exit
    nor the pipe's end is waited for once all came (a process the script started may hold the pipe open; it
    is killed after, with the child)."""
    tail = bytearray()
    deadline = time.monotonic() + timeout_s
    os.set_blocking(log, False)
    with selectors.DefaultSelector() as selector:
        selector.register(data, selectors.EVENT_READ)
        selector.register(log, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise LabChildRaised(f"{where} ran past its {timeout_s:g} s ({TIMEOUT_ENV}) and was stopped")
            for key, _ in selector.select(remaining):
                if key.fd == log:
                    _drain(log, tail)
                    continue
                chunk = os.read(data, _CHUNK)
                if not chunk:
                    _drain(log, tail, _LAST_READS)
                    return tail
                received.feed(chunk)
                if received.done():
                    _drain(log, tail, _LAST_READS)
                    return tail


def _drain(log: int, tail: bytearray, chunks: int = 1) -> None:
    """Up to `chunks` reads of what the log holds now, into `tail` (its last _LOG_TAIL bytes): bounded, so a
    child that writes its log without end cannot keep this process from its deadline."""
    try:
        for _ in range(chunks):
            chunk = os.read(log, _CHUNK)
            if not chunk:
                return
            tail += chunk
            del tail[:-_LOG_TAIL]
    except (BlockingIOError, InterruptedError):
        pass


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


def _state_bound(view: LabRunView, task: int | None) -> tuple[int, str]:
    """The most bytes the child may send as its state, and what sets it: the checkpoint its step starts
    from (a step keeps every shape), or for state 0's rebuild the claimed state 0 where this machine holds
    it, else the largest state a run may have (the bytes are hashed as they come, never kept: what a larger
    bound costs is time, which the task's timeout bounds)."""
    start = 0 if task is None else task
    names = [n for n, _ in (view.claims.initial if start == 0 else view.claims.states[start - 1]).tensors]
    if task is None and not (view.run_dir / checkpoint_path(0)).is_file():
        return checkpoint_bound(None, len(names)), "a state of a run may have"
    with open_checkpoint(view.run_dir, start, None, names) as reader:
        shapes = {name: (span.shape, span.dtype) for name, span in reader.layout.tensors.items()}
    what = "the claimed state 0 has" if task is None else "the state its step starts from has"
    return checkpoint_bound(shapes, len(names)), what


def _replay_one(view: LabRunView, task: int | None, sandboxed_child: bool) -> ChildOutput:
    """State 0 rebuilt (task None) or step `task` replayed in a child process, its output checked and digested."""
    what = "state 0" if task is None else f"step {task}"
    where = f"the lab replay of {what}"
    produced = 0 if task is None else task + 1
    limits = lab_limits()
    bound = _state_bound(view, task)
    if task is not None and not (view.run_dir / lab_batch_path(task)).is_file():
        raise InputError(f"lab batch {view.run_dir / lab_batch_path(task)} is missing (step {task} trained on it)")
    command = [sys.executable, "-m", "p2paudit.audit.lab_child"]
    if sandboxed_child:
        files = [view.run_dir / name for name in (MANIFEST_FILE, SIGNATURE_FILE, SCRIPT_FILE)]
        if task is not None:  # its start and its batch: nothing after
            files += [view.run_dir / checkpoint_path(task), view.run_dir / lab_batch_path(task)]
        command = sandboxed(command, view.run_dir, files, limits)
    received = _Received(produced, bound, where)
    data_read, data_write = os.pipe()
    log_read, log_write = os.pipe()
    request = {
        "run_dir": str(view.run_dir.resolve()), "step": task,
        "values": task is not None and view.claims.values[task] is not None,
        "parent": 0 if sandboxed_child else os.getpid(), "data_fd": data_write,
        "memory": limits.memory_bytes,
    }  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.Popen(
            [*command, json.dumps(request)],
            stdin=subprocess.DEVNULL, stdout=log_write, stderr=log_write, pass_fds=(data_write,), env=env,
            start_new_session=True,
        )  # fmt: skip
    except BaseException:
        os.close(data_read)
        os.close(log_read)
        raise
    finally:
        os.close(data_write)
        os.close(log_write)
    try:
        tail = _receive(data_read, log_read, received, limits.timeout_s, where)
        if not received.complete():
            try:
                ended = f"ended (exit {proc.wait(timeout=_EXIT_WAIT_S)})"
            except subprocess.TimeoutExpired:  # it closed the pipe and went on: killed below
                ended = "closed its pipe"
            _drain(log_read, tail, _LAST_READS)
            _log_child(tail)
            last = _last_line(tail)
            raise LabChildRaised(
                f"the lab replay's process {ended} before its result for {what}{f': {last}' if last else ''}"
            )
    finally:
        os.close(data_read)
        os.close(log_read)
        if proc.poll() is None:  # it, and what it started in its session (bwrap's sandbox ends with bwrap)
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    ops, values = _result(received.parsed, where, bytes(tail))
    return ChildOutput(received.state(), ops, values)
