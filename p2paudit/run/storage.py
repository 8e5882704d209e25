"""Durable file writes and bounded reads for the run directory.

Every file of a run is written whole to a temporary name in the same
directory, fsynced, then renamed over its final name, and the directory is
fsynced: a reader (or a resumed publisher after a kill) sees either the old
file or the new one, never a half-written file that looks valid.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from p2paudit.durable import write_durably
from p2paudit.errors import InputError
from p2paudit.regular_files import open_regular, read_regular

# The longest number a run file may hold: 20 digits cover every u64, the
# shortest round-trip form of a binary64 needs at most 24 characters.
MAX_NUMBER_CHARS = 32
# A JSON string, escapes and all, or an unterminated one to the end: possessive (no backtracking), and every
# match attempt succeeds, so the text is scanned once (the first pattern, `"[^"\\]*(?:\\.[^"\\]*)*"`, took 17 s
# for 32 KB of `\"`: each quote began an attempt that ran to the end and backtracked)
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.?)*+(?:"|\Z)', re.DOTALL)


def write_atomic(path: Path, data: bytes | memoryview) -> None:
    """Write `data` to `path` through temp file + fsync + rename (parents are created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_durably(path, data)


def read_file(path: Path, what: str, max_bytes: int, root: Path) -> bytes:
    """The bytes of the regular file `path` inside directory `root`, at most `max_bytes` of them.

    InputError naming `what` and the path if it is missing, unreadable, too
    large, not a regular file (a FIFO, a device, a directory), a symbolic link,
    or reached through a link or '..' out of `root` (see p2paudit.regular_files).
    """
    return read_regular(path, what, max_bytes, root)


def read_tail(path: Path, what: str, max_bytes: int, root: Path) -> bytes:
    """The last `max_bytes` bytes of the regular file `path` inside `root` (all of it when shorter); InputError
    as read_file's for a link, a device or a path out of `root`."""
    fd = open_regular(path, what, root)
    try:
        size = os.fstat(fd).st_size
        return os.pread(fd, max_bytes, max(0, size - max_bytes))
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
    finally:
        os.close(fd)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _parse_float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"number {text[:24]}... has {len(text)} characters, more than {MAX_NUMBER_CHARS}")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of the binary64 range")
    return value


def _parse_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"integer {text[:24]}... has {len(text)} digits, more than {MAX_NUMBER_CHARS}")
    return int(text)


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise ValueError(f"key {name[:80]!r} appears twice in one object")
            seen.add(name)
    return out


def json_structure(data: bytes) -> int:
    """The arrays, objects and separators (`[`, `{`, `,`) of JSON text outside its strings: one more than
    the values it holds, at most, and what parsing it costs in objects (a string's own bytes aside)."""
    structure = _JSON_STRING.sub(b"", data)
    return structure.count(b"[") + structure.count(b"{") + structure.count(b",")


def parse_json(data: bytes, what: str, max_structure: int | None = None) -> object:
    """Parse UTF-8 JSON from an untrusted file; InputError (one line) for anything unusual.

    Refused: invalid UTF-8 or JSON, NaN and infinities, numbers outside the
    binary64 range (1e400) or longer than MAX_NUMBER_CHARS characters (which
    would otherwise meet Python's int-string limit), duplicate keys, and
    nesting deeper than the interpreter's recursion limit; with
    `max_structure`, text whose json_structure is larger, before it is parsed
    (64 MiB of `{},` made 1.6 GiB of Python objects).
    """
    if max_structure is not None:
        found = json_structure(data)
        if found > max_structure:
            raise InputError(
                f"{what} has {found} JSON arrays, objects and separators, more than the {max_structure} allowed"
            )
    try:
        return json.loads(
            data.decode("utf-8"),
            parse_float=_parse_float,
            parse_int=_parse_int,
            parse_constant=_refuse_constant,
            object_pairs_hook=_unique_keys,
        )
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply to be read") from None
    except ValueError as exc:  # JSONDecodeError and the hooks' refusals
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"{what} is not acceptable JSON: {message}") from None


def remove_temp_files(directory: Path) -> None:
    """Delete temp files left by a killed writer (names `.NAME.PID.tmp`)."""
    if not directory.is_dir():
        return
    for leftover in directory.glob(".*.tmp"):
        leftover.unlink(missing_ok=True)


@contextmanager
def lock_directory(directory: Path) -> Iterator[None]:
    """Hold an exclusive flock on `directory` itself (no lock file is left in the run).

    Raises InputError at once if another process holds it: two publishers
    writing one run directory would interleave their checkpoints.
    """
    fd = os.open(directory, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"run directory {directory} is being written by another process") from None
        yield
    finally:
        os.close(fd)  # closing releases the lock
