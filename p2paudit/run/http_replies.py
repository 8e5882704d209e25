"""What a server's reply must be before its bytes are used (run.remote's helpers): the Content-Range
and Content-Length of a Range reply, and a body read as exact pieces."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import httpx

from p2paudit.errors import InputError
from p2paudit.run.remote_checkpoint import Refused

CHUNK_BYTES = 1 << 20
_CONTENT_RANGE = re.compile(r"bytes ([0-9]{1,20})-([0-9]{1,20})/([0-9]{1,20}|\*)", re.ASCII)


class Stream:
    """A response body read as exact pieces: take(n), skip_to(offset); `position` is the file offset of
    the next byte, and on_position(offset) is called as chunks arrive (progress)."""

    def __init__(self, chunks: Iterator[bytes], position: int, on_position: Callable[[int], None]) -> None:
        self.chunks = chunks
        self.buffer = bytearray()
        self.position = position
        self.on_position = on_position

    def take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = next(self.chunks, None)
            if chunk is None:
                break
            self.buffer += chunk
            self.on_position(self.position + len(self.buffer))
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        self.position += len(out)
        return out

    def skip_to(self, offset: int) -> None:
        while self.position < offset:
            if not self.take(min(offset - self.position, CHUNK_BYTES)):
                return


def check_range_reply(response: httpx.Response, url: httpx.URL, start: int, end: int) -> None:
    """Refused unless a 206 reply's Content-Range is exactly bytes start..end-1 of a file of >= end bytes."""
    text = response.headers.get("content-range", "")
    match = _CONTENT_RANGE.fullmatch(text.strip())
    if (
        match is None
        or (int(match.group(1)), int(match.group(2))) != (start, end - 1)
        or (match.group(3) != "*" and int(match.group(3)) < end)
    ):
        raise Refused(f"Content-Range {text[:60]!r} is not the requested bytes {start}-{end - 1}")
    length = response.headers.get("content-length")
    if length is not None and (not length.isascii() or not length.isdigit() or int(length) != end - start):
        raise Refused(f"Content-Length {length[:24]!r} for the {end - start} bytes {start}-{end - 1} asked for")


def check_length(response: httpx.Response, url: httpx.URL, max_bytes: int, start: int) -> None:
    length = response.headers.get("content-length")
    if length is not None and (not length.isascii() or not length.isdigit() or start + int(length) > max_bytes):
        raise InputError(f"{url}: Content-Length {length[:24]!r} from byte {start}, more than the {max_bytes} allowed")


def check_content_range(response: httpx.Response, url: httpx.URL, start: int, max_bytes: int) -> None:
    text = response.headers.get("content-range", "")
    match = _CONTENT_RANGE.fullmatch(text.strip())
    if match is None or int(match.group(1)) != start:
        raise InputError(f"{url}: Content-Range {text[:60]!r} does not start at the requested byte {start}")
    if match.group(3) != "*" and int(match.group(3)) > max_bytes:
        raise InputError(f"{url}: Content-Range says {match.group(3)} bytes, more than the {max_bytes} allowed")
