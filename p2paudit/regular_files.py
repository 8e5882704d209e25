"""Bounded reads of regular files only (a leaf module: standard library and p2paudit.errors).

Every file a run, a ledger import or a peer names is hostile until checked: a
symlink to /dev/zero would be read until memory runs out, a FIFO blocks for
ever, a link can lead out of the run directory. So a read here

- refuses a symbolic link anywhere in the path below `root` (or as the file
  itself when no root is given), and any path that leaves `root`;
- opens with O_NOFOLLOW | O_NONBLOCK (a FIFO opened this way returns at once)
  and refuses anything fstat does not call a regular file;
- refuses a file larger than `max_bytes` before reading, and reads at most
  `max_bytes + 1` bytes, so a file that grows while read is refused too.

Errors are InputError with one line naming what and where.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from p2paudit.errors import InputError


def _check_components(path: Path, root: Path, what: str) -> None:
    """InputError if `path` is not below `root` or any component below `root` is a symlink."""
    try:
        relative = path.relative_to(root)
    except ValueError:
        raise InputError(f"{what} {path} is outside {root}") from None
    if any(part == ".." for part in relative.parts):
        raise InputError(f"{what} {path} leaves {root} through '..'")
    current = root
    for part in relative.parts[:-1]:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            raise InputError(f"{what} {path} is missing ({current} does not exist)") from None
        except OSError as exc:
            raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
        if stat.S_ISLNK(mode):
            raise InputError(f"{what} {path}: {current} is a symbolic link, which is refused")
        if not stat.S_ISDIR(mode):
            raise InputError(f"{what} {path}: {current} is not a directory")


def open_regular(path: Path, what: str, root: Path | None = None) -> int:
    """A read-only file descriptor for the regular file `path`; the caller closes it.

    InputError if it is missing, a symlink, not a regular file (FIFO, device,
    directory, socket), outside `root`, or unreadable.
    """
    path = Path(path)
    if root is not None:
        _check_components(path, Path(root), what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError(f"{what} {path} is missing") from None
    except OSError as exc:
        if os.path.islink(path):
            raise InputError(f"{what} {path} is a symbolic link, which is refused") from None
        raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise InputError(f"{what} {path} is not a regular file")
    return fd


def regular_size(path: Path, what: str, root: Path | None = None, max_bytes: int | None = None) -> int:
    """The size of the regular file `path`, checked as open_regular does and against `max_bytes`."""
    fd = open_regular(path, what, root)
    try:
        size = os.fstat(fd).st_size
    finally:
        os.close(fd)
    _check_size(path, what, size, max_bytes)
    return size


def _check_size(path: Path, what: str, size: int, max_bytes: int | None) -> None:
    if max_bytes is not None and size > max_bytes:
        raise InputError(f"{what} {path} has {size} bytes, more than the {max_bytes} allowed")


def read_regular(path: Path, what: str, max_bytes: int, root: Path | None = None) -> bytes:
    """The whole of the regular file `path`, at most `max_bytes` bytes; InputError otherwise."""
    fd = open_regular(path, what, root)
    try:
        _check_size(Path(path), what, os.fstat(fd).st_size, max_bytes)
        chunks, left = [], max_bytes + 1
        while left > 0:
            try:
                chunk = os.read(fd, min(left, 1 << 24))
            except OSError as exc:
                raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise InputError(f"{what} {path} grew past the {max_bytes} bytes allowed while it was read")
    return data
