"""Durable whole-file writes (a leaf module: standard library only).

A file is written to a temporary name in its own directory (created with the
final mode, so a private key is never readable by others even briefly),
fsynced, then renamed over its final name, or hard-linked to it when an
existing file must never be replaced; then the directory is fsynced. A
reader, or a process restarted after a kill, sees the old file or the new
one, never a half-written file that looks valid.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def naming_the_file(path: Path) -> Iterator[None]:
    """Give an OSError that names no file (a write or fsync on a full disk: "No space left on device")
    the file it was writing, so the one-line error says which file and so which disk."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from exc


def fsync_dir(directory: Path) -> None:
    """Make a rename inside `directory` durable (silently skipped where the platform cannot)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes | memoryview, *, mode: int = 0o644, replace: bool = True) -> None:
    """Write `data` as the whole of `path`, atomically and durably.

    Precondition: `path.parent` exists. With `replace` false an existing file
    is never touched and FileExistsError is raised (os.link refuses to
    overwrite); with `replace` true it is replaced in one rename.
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)  # a stale temp file could carry a wider mode than `mode`
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with naming_the_file(path), os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def write_atomically(path: Path, data: bytes | memoryview) -> None:
    """Replace `path` with `data` in one rename, without fsync: for views of data kept elsewhere (a status file),
    where a reader must never see half a file but a crash may lose the last version."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with naming_the_file(path), open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
