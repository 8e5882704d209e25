"""Bounded reads of regular files only (a leaf module: standard library and p2paudit.errors).

Every file a run, a ledger import or a peer names is hostile until checked: a
symlink to /dev/zero would be read until memory runs out, a FIFO blocks for
ever, a link can lead out of the run directory. So a read here

- refuses a symbolic link anywhere in the path below `root` (or as the file
  itself when no root is given), and any path that leaves `root`. Below
  `root` the path is walked one component at a time with openat(2) and
  O_NOFOLLOW, so a component swapped for a link between a check and the open
  cannot redirect it (`root` itself is the caller's and may be a link);
- opens with O_NOFOLLOW | O_NONBLOCK (a FIFO opened this way returns at once)
  and refuses anything fstat does not call a regular file;
- refuses a file larger than `max_bytes` before reading, and reads at most
  `max_bytes + 1` bytes, so a file that grows while read is refused too.

Errors are InputError with one line naming what and where.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from p2paudit.errors import InputError

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def _relative_parts(path: Path, root: Path, what: str) -> tuple[str, ...]:
    """The components of `path` below `root`; InputError if it is not below it or uses '..'."""
    try:
        relative = path.relative_to(root)
    except ValueError:
        raise InputError(f"{what} {path} is outside {root}") from None
    if not relative.parts or any(part in ("..", ".") for part in relative.parts):
        raise InputError(f"{what} {path} is not a file name below {root}")
    return relative.parts


def _describe(path: Path, exc: OSError, what: str) -> InputError:
    """A one-line InputError for a failed open of `path` (what the thing at `path` really is)."""
    if isinstance(exc, FileNotFoundError):
        return InputError(f"{what} {path} is missing")
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        mode = 0
    if stat.S_ISLNK(mode) or exc.errno == errno.ELOOP:
        return InputError(f"{what} {path} is a symbolic link, which is refused")
    if exc.errno == errno.ENOTDIR:
        return InputError(f"{what} {path}: a component of the path is not a directory")
    return InputError(f"{what} {path} cannot be read: {exc.strerror}")


def _open_below(path: Path, root: Path, what: str) -> int:
    """A descriptor for `path`, reached from `root` one component at a time without following links."""
    parts = _relative_parts(path, root, what)
    try:
        directory = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except OSError as exc:
        raise InputError(f"{what} {path}: directory {root} cannot be opened: {exc.strerror}") from None
    try:
        current = root
        for part in parts[:-1]:
            current = current / part
            try:
                inner = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | _DIRECTORY | _CLOEXEC, dir_fd=directory)
            except OSError as exc:
                if isinstance(exc, FileNotFoundError):
                    raise InputError(f"{what} {path} is missing ({current} does not exist)") from None
                raise _describe(current, exc, what) from None
            os.close(directory)
            directory = inner
        try:
            return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC, dir_fd=directory)
        except OSError as exc:
            raise _describe(path, exc, what) from None
    finally:
        os.close(directory)


def open_regular(path: Path, what: str, root: Path | None = None) -> int:
    """A read-only file descriptor for the regular file `path`; the caller closes it.

    InputError if it is missing, a symlink (or reached through one below
    `root`), not a regular file (FIFO, device, directory, socket), outside
    `root`, or unreadable.
    """
    path = Path(path)
    if root is not None:
        fd = _open_below(path, Path(root), what)
    else:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | _CLOEXEC)
        except OSError as exc:
            raise _describe(path, exc, what) from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = (
            "a directory"
            if stat.S_ISDIR(mode)
            else "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket"
            if stat.S_ISSOCK(mode)
            else "special"
        )
        raise InputError(f"{what} {path} is {kind}, not a regular file")
    return fd


def _check_size(path: Path, what: str, size: int, max_bytes: int | None) -> None:
    if max_bytes is not None and size > max_bytes:
        raise InputError(f"{what} {path} has {size} bytes, more than the {max_bytes} allowed")


def read_regular(path: Path, what: str, max_bytes: int, root: Path | None = None) -> bytes:
    """The whole of the regular file `path`, at most `max_bytes` bytes; InputError otherwise.

    The first read asks for the file's size, so a file is read into one bytes
    object and never copied (a large manifest costs its size once, not twice).
    """
    fd = open_regular(path, what, root)
    try:
        size = os.fstat(fd).st_size
        _check_size(Path(path), what, size, max_bytes)
        chunks, left, got = [], max_bytes + 1, 0
        while left > 0:
            try:
                chunk = os.read(fd, min(left, size - got if got < size else 1 << 16))
            except OSError as exc:
                raise InputError(f"{what} {path} cannot be read: {exc.strerror}") from None
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
            got += len(chunk)
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) > max_bytes:
        raise InputError(f"{what} {path} grew past the {max_bytes} bytes allowed while it was read")
    return data
