"""Durable file writes and bounded reads for the run directory.

Every file of a run is written whole to a temporary name in the same
directory, fsynced, then renamed over its final name, and the directory is
fsynced: a reader (or a resumed publisher after a kill) sees either the old
file or the new one, never a half-written file that looks valid.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from p2paudit.durable import write_durably
from p2paudit.errors import InputError


def write_atomic(path: Path, data: bytes | memoryview) -> None:
    """Write `data` to `path` through temp file + fsync + rename (parents are created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_durably(path, data)


def read_file(path: Path, what: str, max_bytes: int | None = None) -> bytes:
    """The bytes of `path`; InputError naming `what` and the path if missing, unreadable or too large."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise InputError(f"{what} {path} is missing") from None
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
    if max_bytes is not None and size > max_bytes:
        raise InputError(f"{what} {path} has {size} bytes, more than the {max_bytes} allowed")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None


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
