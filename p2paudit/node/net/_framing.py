"""Length-prefixed frames on a libp2p stream, and a token bucket (adapter-internal).

A frame is an unsigned LEB128 varint (the multiformats unsigned-varint: at most
9 bytes, minimal encoding) giving the body length, then the body. The reader
checks the announced length against its maximum *before* reading the body, so
a peer can never make us buffer more than the maximum.
"""

from __future__ import annotations

from typing import Protocol

import trio

from p2paudit.errors import InputError
from p2paudit.identity import encode_uvarint  # one varint encoder (peer ids and frames)

# multiformats unsigned-varint caps values at 2**63 - 1, i.e. 9 bytes.
_MAX_VARINT_BYTES = 9


class ByteStream(Protocol):
    """What a frame needs from a stream: libp2p's INetStream satisfies it."""

    async def read(self, n: int | None = None) -> bytes: ...

    async def write(self, data: bytes) -> None: ...


async def read_exactly(stream: ByteStream, n: int) -> bytes:
    """Read exactly n bytes; InputError if the stream ends first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = await stream.read(n - len(buf))
        if not chunk:
            raise InputError(f"stream ended after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


async def read_uvarint(stream: ByteStream) -> int:
    """Read one minimal unsigned varint, one byte at a time (never reads past it)."""
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        byte = (await read_exactly(stream, 1))[0]
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            if byte == 0 and i > 0:
                raise InputError("varint length prefix is not minimally encoded")
            return value
    raise InputError(f"varint length prefix longer than {_MAX_VARINT_BYTES} bytes")


async def read_frame(stream: ByteStream, max_size: int) -> bytes:
    """Read one frame whose body is at most max_size bytes (checked before the body is read)."""
    length = await read_uvarint(stream)
    if length > max_size:
        raise InputError(f"frame announces {length} bytes, maximum is {max_size}")
    return await read_exactly(stream, length)


async def write_frame(stream: ByteStream, data: bytes, max_size: int) -> None:
    """Write one frame; InputError if data is over max_size (nothing is written then)."""
    if len(data) > max_size:
        raise InputError(f"frame of {len(data)} bytes exceeds the maximum of {max_size}")
    await stream.write(encode_uvarint(len(data)) + data)


class TokenBucket:
    """`rate` tokens per second up to `burst`; `take()` spends one if there is one.

    Times are trio's clock unless given (`now`): a bucket may be made before the loop runs, so a full
    one made without a time starts counting at its first `take`, which is the same as counting from its
    making (it cannot hold more than full)."""

    def __init__(self, rate: float, burst: float, now: float | None = None) -> None:
        if rate <= 0 or burst < 1:
            raise InputError(f"token bucket needs rate > 0 and burst >= 1, got rate={rate} burst={burst}")
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.stamp = now

    def take(self, now: float | None = None) -> bool:
        now = trio.current_time() if now is None else now
        stamp = now if self.stamp is None else self.stamp
        self.tokens = min(self.burst, self.tokens + (now - stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False
