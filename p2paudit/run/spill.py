"""Partial gradient sums kept on disk while a streamed step waits for their siblings (engine.streaming).

Each kept set is one anonymous file in the scratch directory: created already
unlinked (O_TMPFILE where the system has it), so a killed process leaves
nothing behind. Tensors are written one after another and read back one at a
time with pread(2); nothing is mapped, so none of it counts against the
process's resident memory. A full disk is an InputError naming the directory.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from p2paudit.errors import InputError, InternalError


@contextmanager
def scratch_directory(parent: Path, prefix: str) -> Iterator[Path]:
    """A fresh directory under `parent` (created if missing), removed with everything in it on exit.

    InputError (one line) if `parent` cannot hold it: a file in the way, no permission, a full disk.
    """
    try:
        parent.mkdir(parents=True, exist_ok=True)
        holder = tempfile.TemporaryDirectory(dir=parent, prefix=prefix)
    except OSError as exc:
        raise InputError(f"scratch directory {parent} cannot be used: {exc.strerror or exc}") from None
    with holder as path:
        yield Path(path)


class DiskGradStore:
    """engine.streaming.GradStore on files in `directory` (which must exist)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._sets: dict[object, tuple[int, dict[str, tuple[int, tuple[int, ...], np.dtype]]]] = {}  # handle: int
        self._next = 0
        self.bytes_written = 0

    def put(self, grads: dict[str, np.ndarray]) -> object:
        try:
            handle = tempfile.TemporaryFile(dir=self.directory, buffering=0)
        except OSError as exc:
            raise InputError(f"scratch directory {self.directory} cannot take a file: {exc.strerror}") from None
        fd = os.dup(handle.fileno())
        handle.close()  # the dup keeps the (unlinked) file open
        index: dict[str, tuple[int, tuple[int, ...], np.dtype]] = {}
        offset = 0
        try:
            for name, array in grads.items():
                data = np.ascontiguousarray(array).reshape(-1).data.cast("B")
                done = 0
                while done < len(data):
                    done += os.pwrite(fd, data[done:], offset + done)
                index[name] = (offset, tuple(array.shape), array.dtype)
                offset += len(data)
        except OSError as exc:
            os.close(fd)
            raise InputError(
                f"scratch directory {self.directory}: cannot keep a partial gradient sum of {offset} bytes "
                f"and more: {exc.strerror}"
            ) from None
        self.bytes_written += offset
        self._next += 1
        self._sets[self._next] = (fd, index)
        return self._next

    def take(self, handle: object, name: str) -> np.ndarray:
        if handle not in self._sets:
            raise InternalError(f"gradient store: unknown handle {handle!r}")
        fd, index = self._sets[handle]
        offset, shape, dtype = index[name]
        out = np.empty(shape, dtype=dtype)
        view = out.reshape(-1).data.cast("B")
        done = 0
        while done < len(view):
            got = os.preadv(fd, [view[done:]], offset + done)
            if got == 0:
                raise InternalError(f"gradient store: the file of {name} ended early")
            done += got
        return out

    def drop(self, handle: object) -> None:
        kept = self._sets.pop(handle, None)
        if kept is not None:
            os.close(kept[0])

    def close(self) -> None:
        for handle in list(self._sets):
            self.drop(handle)

    def __enter__(self) -> DiskGradStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
