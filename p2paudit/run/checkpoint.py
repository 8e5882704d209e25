"""Checkpoints: a training state in a safetensors file, checked against the manifest on load.

The safetensors metadata carries the magic and version of this format:
{"format": "p2paudit-checkpoint", "version": "1", "step": "<n>", "state_digest": "sha256:<hex>"}.
A checkpoint is only ever trusted after its recomputed state digest equals
the one the manifest records for that step.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np

from p2paudit.durable import fsync_dir
from p2paudit.engine.config import MAX_PARAMS
from p2paudit.errors import InputError, InternalError
from p2paudit.regular_files import open_regular
from p2paudit.run.checkpoint_layout import (
    SAFETENSORS_DTYPES,
    CheckpointLayout,
    header_length,
    max_header_bytes,
    parse_layout,
)
from p2paudit.run.digest import StateDigest, combine_tensor_digests, digest_state, digest_tensor
from p2paudit.run.storage import write_atomic

CHECKPOINT_FORMAT = "p2paudit-checkpoint"
CHECKPOINT_VERSION = "1"
_DTYPES = SAFETENSORS_DTYPES


def checkpoint_path(step: int) -> str:
    """Relative path of the checkpoint holding the state after `step` (0: the initial state)."""
    return f"checkpoints/step-{step:08d}.safetensors"


def checkpoint_header(step: int, shapes: Mapping[str, tuple[tuple[int, ...], np.dtype]], digest_text: str) -> bytes:
    """The length prefix and JSON header of a checkpoint of tensors `shapes`, laid out in name order.

    Written here rather than by safetensors.save, whose header key order
    varies between calls: header JSON with sorted keys and no whitespace,
    padded with spaces to a multiple of 8 bytes; tensors laid out in name
    order, C-contiguous little-endian, from the first byte after the header.
    """
    metadata = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "step": str(step),
        "state_digest": digest_text,
    }
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for name in sorted(shapes):
        shape, dtype = shapes[name]
        if np.dtype(dtype).name not in _DTYPES:
            raise InputError(f"tensor {name}: dtype {np.dtype(dtype)} cannot go into a checkpoint")
        size = math.prod(shape) * np.dtype(dtype).itemsize
        header[name] = {
            "dtype": _DTYPES[np.dtype(dtype).name],
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def tensor_bytes(array: np.ndarray) -> bytes:
    """The C-order little-endian bytes of `array` as a checkpoint stores them."""
    # Not np.ascontiguousarray: it turns the 0-d step counter into shape (1,).
    return array.astype(array.dtype.newbyteorder("<"), order="C", copy=False).tobytes(order="C")


def encode_checkpoint(step: int, state: Mapping[str, np.ndarray], digest: StateDigest) -> bytes:
    """The safetensors bytes of a checkpoint, byte-for-byte reproducible (see checkpoint_header)."""
    return b"".join(checkpoint_pieces(step, state, digest))


def checkpoint_pieces(step: int, state: Mapping[str, np.ndarray], digest: StateDigest) -> Iterator[bytes]:
    """encode_checkpoint's bytes in pieces: the header, then each tensor's bytes (one tensor copied at a time)."""
    shapes = {name: (tuple(array.shape), array.dtype) for name, array in state.items()}
    yield checkpoint_header(step, shapes, digest.text())
    for name in sorted(state):
        yield tensor_bytes(state[name])


class CheckpointWriter:
    """Writes a checkpoint one tensor at a time, in any order; the bytes are encode_checkpoint's.

    The header's size does not depend on the digest (always `sha256:` and 64
    hex digits), so every tensor's offset is known before the first is
    written; the header is written last, with the digest, by `finish`, which
    also fsyncs and renames the file into place. A full disk is an InputError.
    """

    def __init__(self, path: Path, step: int, shapes: Mapping[str, tuple[tuple[int, ...], np.dtype]]) -> None:
        self.path = path
        self._step = step
        self._shapes = dict(shapes)
        placeholder = checkpoint_header(step, self._shapes, "sha256:" + "0" * 64)
        self._layout = parse_layout(placeholder[8:], self._shapes, str(path))
        self._written: set[str] = set()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._tmp.unlink(missing_ok=True)
        self._fd: int | None = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)

    def write(self, name: str, array: np.ndarray) -> None:
        span = self._layout.tensors.get(name)
        if span is None or tuple(array.shape) != span.shape or array.dtype != span.dtype:
            raise InternalError(f"checkpoint writer: tensor {name} {array.dtype} {array.shape} is not in the layout")
        self._pwrite(tensor_bytes(array), span.start)
        self._written.add(name)

    def finish(self, digest: StateDigest) -> Path:
        """Write the header with `digest`, make the file durable and give it its name."""
        missing = sorted(set(self._layout.tensors) - self._written)
        if missing:
            raise InternalError(f"checkpoint writer: tensors never written: {missing[:4]}")
        self._pwrite(checkpoint_header(self._step, self._shapes, digest.text()), 0)
        fd = self._open_fd()
        try:
            os.fsync(fd)
        except OSError as exc:
            raise self._failed(exc) from None
        os.close(fd)
        self._fd = None
        os.replace(self._tmp, self.path)
        fsync_dir(self.path.parent)
        return self.path

    def abort(self) -> None:
        """Remove the unfinished file (safe to call after finish)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> CheckpointWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.abort()

    def _open_fd(self) -> int:
        if self._fd is None:
            raise InternalError(f"checkpoint writer of {self.path} used after finish or abort")
        return self._fd

    def _pwrite(self, data: bytes, offset: int) -> None:
        fd, view, done = self._open_fd(), memoryview(data), 0
        while done < len(view):
            try:
                done += os.pwrite(fd, view[done:], offset + done)
            except OSError as exc:
                raise self._failed(exc) from None

    def _failed(self, exc: OSError) -> InputError:
        return InputError(f"cannot write checkpoint {self.path}: {exc.strerror or exc}")


def save_checkpoint(run_dir: Path, step: int, state: Mapping[str, np.ndarray], digest: StateDigest) -> Path:
    """Write the checkpoint of `step` atomically; `digest` must be `digest_state(state)`."""
    path = run_dir / checkpoint_path(step)
    write_atomic(path, encode_checkpoint(step, state, digest))
    return path


def checkpoint_bound(shapes: Mapping[str, tuple[tuple[int, ...], np.dtype]] | None, count: int) -> int:
    """The largest checkpoint file accepted: its tensors' bytes (or the config bounds' worst case) plus a header."""
    if shapes is None:
        data = 3 * MAX_PARAMS * 4 + 8  # params and two moments, float32, and the step counter
    else:
        data = sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in shapes.values())
    return 8 + max_header_bytes(count) + data


class CheckpointReader:
    """An open checkpoint whose header, metadata and length are checked; tensors are read one at a time.

    Reads are pread(2) into a fresh array, so holding the reader costs no
    memory and nothing of the file stays resident after a tensor is dropped.
    """

    def __init__(self, path: Path, fd: int, layout: CheckpointLayout, expected: StateDigest | None = None) -> None:
        self.path = path
        self.layout = layout
        self._fd: int | None = fd
        self._expected = expected.tensor_map() if expected is not None else None

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    @property
    def names(self) -> list[str]:
        return list(self.layout.tensors)

    def read(self, name: str) -> np.ndarray:
        """Tensor `name` as a new C-contiguous array (little-endian, as stored); when the reader was
        opened with `check_reads`, InputError unless its digest is the expected tensor digest, so
        a file changed after it was verified is never used."""
        array = self._read(name)
        if self._expected is not None and digest_tensor(name, array) != self._expected.get(name):
            raise InputError(f"checkpoint {self.path}: tensor {name} is not the one verified (changed while in use?)")
        return array

    def _read(self, name: str) -> np.ndarray:
        if self._fd is None:
            raise InternalError(f"checkpoint {self.path} read after close")
        span = self.layout.tensors[name]
        out = np.empty(span.shape, dtype=span.dtype.newbyteorder("<"))
        view = out.reshape(-1).data.cast("B")
        done = 0
        while done < len(view):
            try:
                got = os.preadv(self._fd, [view[done:]], span.start + done)
            except OSError as exc:
                raise InputError(f"checkpoint {self.path} cannot be read: {exc.strerror}") from None
            if got == 0:
                raise InputError(f"checkpoint {self.path} ended inside tensor {name} (truncated while read)")
            done += got
        return out if out.dtype.isnative else out.astype(span.dtype.newbyteorder("="))

    def verify(self, expected: StateDigest) -> None:
        """InputError unless the state digest, computed one tensor at a time, is `expected`."""
        names = sorted(self.layout.tensors, key=lambda n: n.encode("utf-8"))
        tensors = tuple((n, digest_tensor(n, self._read(n))) for n in names)
        observed = StateDigest(combine_tensor_digests(tensors), tensors)
        if observed.digest != expected.digest:
            differ = differing_tensors(expected, observed)
            raise InputError(
                f"checkpoint {self.path}: state digest {observed.text()} is not the manifest's "
                f"{expected.text()} (tensors differ: {', '.join(differ) or 'none; names or order'})"
            )


def check_metadata(layout: CheckpointLayout, step: int, expected: StateDigest | None, where: str) -> None:
    """InputError unless the header's metadata is this format's, of `step`, naming `expected`'s digest (any
    digest where `expected` is None)."""
    want: dict[str, str | None] = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "step": str(step),
        "state_digest": expected.text() if expected is not None else layout.metadata.get("state_digest"),
    }
    got = {k: layout.metadata.get(k) for k in want}
    if got != want:
        raise InputError(f"{where}: metadata {got} is not {want}")


def open_checkpoint(
    run_dir: Path,
    step: int,
    expected: StateDigest | None,
    names: list[str],
    shapes: Mapping[str, tuple[tuple[int, ...], np.dtype]] | None = None,
    check_reads: bool = False,
) -> CheckpointReader:
    """Open the checkpoint of `step` and check everything but its data: InputError naming the file if it
    is missing, not a regular file inside `run_dir`, larger than checkpoint_bound, not a safetensors
    file whose tensors are exactly `names` (with the dtypes and shapes of `shapes`, when given) tiling
    the file, or if its metadata is not this format, this step and `expected`'s digest (any digest where
    `expected` is None). With `check_reads`, every tensor read is checked against `expected`'s tensor
    digest as it is read."""
    path = run_dir / checkpoint_path(step)
    fd = open_regular(path, "checkpoint", run_dir)
    try:
        size = os.fstat(fd).st_size
        bound = checkpoint_bound(shapes, len(names))
        if size > bound:
            raise InputError(f"checkpoint {path} has {size} bytes, more than the {bound} allowed for its tensors")
        where = f"checkpoint {path}"
        n = header_length(_pread_exact(fd, 8, 0, where), len(names), where)
        layout = parse_layout(_pread_exact(fd, n, 8, where), shapes, where, names)
        check_metadata(layout, step, expected, where)
        if size != layout.file_size:
            raise InputError(f"{where} has {size} bytes, its header says {layout.file_size}")
    except BaseException:
        os.close(fd)
        raise
    return CheckpointReader(path, fd, layout, expected if check_reads else None)


def digest_checkpoint(run_dir: Path, step: int, names: list[str]) -> StateDigest:
    """The state digest of the checkpoint of `step`, computed here from its tensors (the digest its metadata
    names is not trusted: another process wrote it), one tensor at a time; open_checkpoint's InputErrors
    (the tensors must be exactly `names`)."""
    with open_checkpoint(run_dir, step, None, names) as reader:
        order = sorted(names, key=lambda n: n.encode("utf-8"))
        tensors = tuple((n, digest_tensor(n, reader.read(n))) for n in order)
    return StateDigest(combine_tensor_digests(tensors), tensors)


def load_checkpoint(
    run_dir: Path,
    step: int,
    expected: StateDigest,
    names: list[str],
    shapes: Mapping[str, tuple[tuple[int, ...], np.dtype]] | None = None,
) -> dict[str, np.ndarray]:
    """Load the checkpoint of `step`, tensors in the order of `names`, checked against `expected`.

    Every check of open_checkpoint comes first, before any tensor is read;
    then InputError if its state digest is not `expected` (naming the
    tensors that differ).
    """
    with open_checkpoint(run_dir, step, expected, names, shapes) as reader:
        state = {name: reader.read(name) for name in names}
    observed = digest_state(state)
    if observed.digest != expected.digest:
        differ = differing_tensors(expected, observed)
        raise InputError(
            f"checkpoint {reader.path}: state digest {observed.text()} is not the manifest's "
            f"{expected.text()} (tensors differ: {', '.join(differ) or 'none; names or order'})"
        )
    return state


def _pread_exact(fd: int, n: int, offset: int, where: str) -> bytes:
    data = os.pread(fd, n, offset)
    if len(data) != n:
        raise InputError(f"{where} is not a valid safetensors file: it ends inside its header")
    return data


def differing_tensors(expected: StateDigest, observed: StateDigest) -> list[str]:
    """Names whose tensor digests differ, or that only one of the two states has."""
    a, b = expected.tensor_map(), observed.tensor_map()
    return sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
