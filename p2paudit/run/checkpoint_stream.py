"""A checkpoint digested as its bytes arrive (from a pipe), nothing of it written or kept.

A lab replay's child sends the state it produced as checkpoint bytes (run.checkpoint's format); the
parent needs only its digest, so it parses the length and header as they come (checked as a file's
are: run.checkpoint_layout, run.checkpoint.check_metadata), refuses a header giving more than the
caller's bound, then hashes each tensor's bytes in the order they lie (run.tensor_digest.TensorHasher).
A state as large as a 1B-parameter run's (about 12 GB with its moments) is neither written to the
parent's disk nor held in its memory.
"""

from __future__ import annotations

from p2paudit.errors import InputError
from p2paudit.run.checkpoint import check_metadata
from p2paudit.run.checkpoint_layout import CheckpointLayout, TensorSpan, header_length, parse_layout
from p2paudit.run.digest import StateDigest, combine_tensor_digests
from p2paudit.tensor_digest import TensorHasher


class CheckpointStream:
    """The checkpoint of state `step`, tensors exactly `names`, fed in pieces (`feed`), its state digest
    computed here (`finish`). InputError (one line, naming `where`) for a malformed length, header or
    metadata, a header giving more than `bound` bytes (what sets it: `bounded_by`, "allowed" or as "the
    state its step starts from has"), bytes past its end, or an end before it."""

    def __init__(self, step: int, names: list[str], bound: int, bounded_by: str, where: str) -> None:
        self._step, self._names, self._where = step, names, where
        self._bound, self._bounded_by = bound, bounded_by
        self._head = bytearray()
        self._header_length: int | None = None
        self._layout: CheckpointLayout | None = None
        self._spans: list[TensorSpan] = []
        self._index = 0  # of the tensor whose bytes come next
        self._at = 0  # bytes of the file fed so far
        self._hasher: TensorHasher | None = None
        self._digests: dict[str, bytes] = {}

    def feed(self, piece: bytes | memoryview) -> None:
        view = memoryview(piece)
        while view:
            if self._layout is None:
                view = self._feed_head(view)
                continue
            if self._index == len(self._spans):
                raise InputError(f"{self._where}: more bytes than the {self._layout.file_size} its header gives")
            span = self._spans[self._index]
            take = min(len(view), span.end - self._at)
            if self._hasher is None:
                self._hasher = TensorHasher(span.name, span.dtype, span.shape)
            self._hasher.update(view[:take])
            self._at += take
            view = view[take:]
            self._next_tensors()

    def done(self) -> bool:
        """Whether every byte the header gives has come."""
        return self._layout is not None and self._index == len(self._spans)

    def finish(self) -> StateDigest:
        """The state digest, once every byte the header gives has come."""
        if self._layout is None or self._index < len(self._spans):
            size = "" if self._layout is None else f" of the {self._layout.file_size} its header gives"
            raise InputError(f"{self._where}: ended after {self._at} bytes{size}")
        order = sorted(self._names, key=lambda n: n.encode("utf-8"))
        tensors = tuple((n, self._digests[n]) for n in order)
        return StateDigest(combine_tensor_digests(tensors), tensors)

    def _feed_head(self, view: memoryview) -> memoryview:
        """Take the length prefix, then the header, from `view`; what is left of it."""
        want = 8 if self._header_length is None else 8 + self._header_length
        take = want - len(self._head)
        self._head += view[:take]
        self._at += min(take, len(view))
        if len(self._head) == want:
            if self._header_length is None:
                self._header_length = header_length(bytes(self._head), len(self._names), self._where)
            else:
                self._start_data()
        return view[take:]

    def _start_data(self) -> None:
        layout = parse_layout(bytes(self._head[8:]), None, self._where, self._names)
        check_metadata(layout, self._step, None, self._where)
        if layout.file_size > self._bound:
            raise InputError(
                f"{self._where}: its header gives {layout.file_size} bytes, more than the {self._bound} {self._bounded_by}"
            )
        self._layout = layout
        self._spans = sorted(layout.tensors.values(), key=lambda s: s.start)
        self._next_tensors()

    def _next_tensors(self) -> None:
        """Close every tensor whose bytes have all come (an empty one at once)."""
        while self._index < len(self._spans) and self._at == self._spans[self._index].end:
            span = self._spans[self._index]
            hasher = self._hasher or TensorHasher(span.name, span.dtype, span.shape)
            self._digests[span.name] = hasher.digest()
            self._hasher = None
            self._index += 1
