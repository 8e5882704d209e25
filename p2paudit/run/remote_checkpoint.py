"""The pieces of one checkpoint fetched from a server: header first, then tensors, each checked against
the manifest's tensor digest before it is appended to the partial file (run.remote's helper).

The partial file only ever holds verified bytes: the 8-byte length and the
header once they parse as this checkpoint's (checkpoint_layout, metadata of
this state and digest), then whole tensors in file order. An interrupted
fetch resumes after the verified prefix, which is checked again first.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from p2paudit.errors import InputError
from p2paudit.run.checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_VERSION
from p2paudit.run.checkpoint_layout import CheckpointLayout, Shapes, TensorSpan, header_length, parse_layout
from p2paudit.run.digest import digest_tensor, format_digest


class Refused(Exception):
    """The server's bytes are not the manifest's file: the cache entry is discarded (a one-line reason)."""


# pieces(bounds): the bytes of each (start, end) of bounds, in order (a generator: closed when left early)
Pieces = Callable[[list[tuple[int, int]]], Generator[bytes, None, None]]


@dataclass
class CheckpointPieces:
    """How to check the pieces of one checkpoint: where it is, its state, the manifest's digests, the shapes
    (None: each tensor's as the header states it, bounded by checkpoint_layout.MAX_ELEMENTS; its digest,
    which covers its shape, then decides)."""

    where: str  # the file's path in the run, for messages (the caller adds the URL)
    state: int
    state_digest: str  # sha256:<hex>, as the metadata must say
    digests: dict[str, bytes]  # tensor name -> the manifest's tensor digest
    shapes: Shapes | None
    size: int | None = None  # the file's length, known once its header is parsed

    @property
    def names(self) -> list[str]:
        return list(self.digests)

    def parse(self, prefix: bytes, header: bytes) -> CheckpointLayout:
        """The layout from the 8-byte length and the header; InputError if either is not this checkpoint's."""
        header_length(prefix, len(self.digests), self.where)
        layout = parse_layout(header, self.shapes, self.where, self.names)
        want = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "step": str(self.state)}
        want["state_digest"] = self.state_digest
        got = {k: layout.metadata.get(k) for k in want}
        if got != want:
            raise InputError(f"{self.where}: metadata {got} is not {want}")
        self.size = layout.file_size
        return layout

    def check(self, span: TensorSpan, data: bytes) -> str | None:
        """None if `data` is tensor `span`'s bytes as the manifest digests them, else the one-line reason."""
        array = np.frombuffer(data, dtype=span.dtype.newbyteorder("<")).reshape(span.shape)
        got = digest_tensor(span.name, array)
        want = self.digests[span.name]
        if got == want:
            return None
        return (
            f"tensor {span.name} (bytes {span.start}-{span.end - 1}): digest {format_digest(got)} "
            f"is not the manifest's {format_digest(want)}"
        )

    def resume(self, partial: Path) -> tuple[CheckpointLayout | None, int]:
        """(layout, length of the verified prefix) of an earlier partial file, its tensors checked again
        and anything after the first one that fails cut off; (None, 0), the file removed, if its header
        is unusable."""
        if partial.is_symlink() or (partial.exists() and not partial.is_file()):
            try:
                partial.unlink()
            except OSError as exc:
                raise InputError(f"cache entry {partial} is not a file and cannot be removed: {exc.strerror}") from None
        if not partial.is_file():
            return None, 0
        with open(partial, "rb") as handle:
            prefix = handle.read(8)
            try:
                header = handle.read(header_length(prefix, len(self.digests), self.where))
                layout = self.parse(prefix, header)
            except InputError:
                layout = None
            if layout is None or len(header) + 8 != layout.data_start:
                handle.close()
                partial.unlink(missing_ok=True)
                return None, 0
            have = layout.data_start
            size = os.fstat(handle.fileno()).st_size
            for span in file_order(layout.tensors.values()):
                if span.end > size:
                    break
                handle.seek(span.start)
                if self.check(span, handle.read(span.end - span.start)) is not None:
                    break
                have = span.end
        os.truncate(partial, have)
        return layout, have

    def assemble(
        self,
        partial: Path,
        layout: CheckpointLayout | None,
        have: int,
        pieces: Pieces,
        request_bytes: int,
    ) -> None:
        """Fetch what `partial` lacks after its verified prefix of `have` bytes: the header if there is
        no layout yet, then the tensors, consecutive ones together up to `request_bytes` per request
        (pieces(bounds) yields the bytes of each (start, end) of bounds), each appended only once it
        is verified."""
        if layout is None:
            (prefix,) = pieces([(0, 8)])
            try:
                n = header_length(prefix, len(self.digests), self.where)
            except InputError as exc:
                raise Refused(str(exc)) from None
            (header,) = pieces([(8, 8 + n)])
            try:
                layout = self.parse(prefix, header)
            except InputError as exc:
                raise Refused(str(exc)) from None
            write_synced(partial, prefix + header, "wb")
            have = layout.data_start
        missing = [span for span in file_order(layout.tensors.values()) if span.end > have]
        with open(partial, "ab") as out:
            try:
                for group in groups(missing, request_bytes):
                    with closing(pieces([(s.start, s.end) for s in group])) as got:
                        for span, data in zip(group, got, strict=True):  # strict: the reply's end is checked
                            reason = self.check(span, data)
                            if reason is not None:
                                raise Refused(reason)
                            out.write(data)
            finally:
                out.flush()
                os.fsync(out.fileno())


def groups(spans: list[TensorSpan], limit: int) -> list[list[TensorSpan]]:
    """Consecutive spans cut into groups of at least `limit` bytes (the last may be smaller)."""
    groups: list[list[TensorSpan]] = [[]]
    size = 0
    for span in spans:
        if size >= limit:
            groups.append([])
            size = 0
        groups[-1].append(span)
        size += span.end - span.start
    return [g for g in groups if g]


def file_order(spans: Iterable[TensorSpan]) -> list[TensorSpan]:
    return sorted(spans, key=lambda s: (s.start, s.end))


def write_synced(path: Path, data: bytes, mode: str) -> None:
    with open(path, mode) as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
