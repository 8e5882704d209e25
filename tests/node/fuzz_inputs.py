"""Protocols, their limits, a recorded input (`Case`), framing bytes and byte and msgpack mutations.

Part of the fuzzing harness of fuzz_peer.py.
"""

from __future__ import annotations

import base64
import json
import random
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import msgpack

from p2paudit.node import wire

# -- protocols and limits ------------------------------------------------------------------------------------

MESHSUB = ("/meshsub/1.0.0", "/meshsub/1.1.0", "/meshsub/1.2.0")
SYNC, WITNESS = wire.SYNC_PROTOCOL, wire.WITNESS_PROTOCOL
PEERS = "/p2paudit/peers/1.0.0"
SETTLED = "/p2paudit/settled/1.0.0"
KAD = "/ipfs/kad/1.0.0"
IDENTIFY, IDENTIFY_PUSH, PING = "/ipfs/id/1.0.0", "/ipfs/id/push/1.0.0", "/ipfs/ping/1.0.0"
STREAM_PROTOCOLS = (*MESHSUB, SYNC, WITNESS, PEERS, SETTLED, KAD, IDENTIFY, IDENTIFY_PUSH, PING)
# Raw TCP, below libp2p: bytes from the first byte of a connection; the Noise handshake's first message (after
# /noise is negotiated); its third message; the signed payload inside a real third message; yamux frames
# inside a finished Noise session (after /yamux/1.0.0 is negotiated).
TCP, NOISE_MSG1, NOISE_MSG3, NOISE_PAYLOAD, YAMUX = "tcp", "noise/msg1", "noise/msg3", "noise/payload", "yamux"
RAW_PROTOCOLS = (TCP, NOISE_MSG1, NOISE_MSG3, NOISE_PAYLOAD, YAMUX)
ALL_PROTOCOLS = STREAM_PROTOCOLS + RAW_PROTOCOLS

# What the daemon accepts in one frame (a varint length, then the body), per protocol. Ping is not framed.
FRAME_LIMITS = {
    **dict.fromkeys(MESHSUB, (1 << 20) + 64 * 1024),  # NodeConfig.max_gossip_message + 64 KiB
    SYNC: wire.MAX_SYNC_REQUEST_BYTES,
    WITNESS: wire.MAX_WITNESS_REQUEST_BYTES,
    PEERS: 0,
    SETTLED: 0,
    KAD: 4 << 20,
    IDENTIFY: 1 << 20,
    IDENTIFY_PUSH: 1 << 20,
}
# A 6-byte RPC frame whose protobuf does not decode: it ended the whole node in py-libp2p 0.8.1
# (Pubsub.continuously_read_stream does not catch DecodeError; ../shared/notes/py-libp2p-0.8.1.md).
KILLER_RPC = bytes.fromhex("060affffffff0f")

NOISE_NAME = b"Noise_XX_25519_ChaChaPoly_SHA256"
MAX_NOISE_PLAINTEXT = 65535 - 16
YAMUX_HEADER = ">BBHII"  # version, type, flags, stream id, length (or window delta, or ping value)


# -- inputs and their record ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One input: the exact bytes written after the protocol is negotiated (raw protocols: see RAW_PROTOCOLS)."""

    protocol: str
    kind: str
    index: int
    data: bytes

    def to_json(self) -> dict:
        """Hex, or above 256 bytes zlib and base64 (the big inputs are mostly padding)."""
        head = {"protocol": self.protocol, "kind": self.kind, "index": self.index, "size": len(self.data)}
        if len(self.data) <= 256:
            return {**head, "hex": self.data.hex()}
        return {**head, "zlib": base64.b64encode(zlib.compress(self.data, 9)).decode()}

    @staticmethod
    def from_json(item: dict) -> Case:
        data = bytes.fromhex(item["hex"]) if "hex" in item else zlib.decompress(base64.b64decode(item["zlib"]))
        return Case(item["protocol"], item["kind"], item["index"], data)

    def describe(self, limit: int = 200) -> str:
        text = self.data.hex()
        more = f"..(+{len(text) - limit} hex digits)" if len(text) > limit else ""
        return f"{self.protocol} #{self.index} [{self.kind}] {len(self.data)} bytes: {text[:limit]}{more}"


def load_cases(path: Path, protocols: Iterable[str] | None = None) -> list[Case]:
    """The inputs a campaign recorded (JSON lines), optionally only those of `protocols`."""
    wanted = None if protocols is None else set(protocols)
    cases = []
    for line in path.read_text().splitlines():
        item = json.loads(line)
        if "protocol" in item and (wanted is None or item["protocol"] in wanted):
            cases.append(Case.from_json(item))
    return cases


# -- bytes ---------------------------------------------------------------------------------------------------


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def frame(body: bytes) -> bytes:
    return uvarint(len(body)) + body


def ms_line(name: bytes) -> bytes:
    """One multistream-select message: varint length, the name, a newline."""
    return frame(name + b"\n")


MS_HEADER = ms_line(b"/multistream/1.0.0")


def yamux_frame(kind: int, flags: int, stream: int, length: int, payload: bytes = b"") -> bytes:
    return struct.pack(YAMUX_HEADER, 0, kind, flags, stream, length) + payload


def noise_frame(body: bytes) -> bytes:
    return len(body).to_bytes(2, "big") + body


# -- mutations -----------------------------------------------------------------------------------------------

INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF)
INTERESTING_INTS = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def _span(rng: random.Random, n: int) -> tuple[int, int]:
    i = rng.randrange(n + 1)
    return i, rng.randint(i, min(n, i + rng.choice((1, 4, 16, 256))))


def _flip(rng, d, others):
    b = bytearray(d or b"\0")
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def _set_byte(rng, d, others):
    b = bytearray(d or b"\0")
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.choice(INTERESTING_BYTES) if rng.random() < 0.7 else rng.randrange(256)
    return bytes(b)


def _set_word(rng, d, others):
    i = rng.randrange(len(d) + 1)
    word = struct.pack(rng.choice(("<I", ">I")), rng.choice(INTERESTING_INTS))
    return d[:i] + word + d[i + 4 :]


def _truncate(rng, d, others):
    return d[: rng.randrange(len(d))] if d else d


def _delete(rng, d, others):
    i, j = _span(rng, len(d))
    return d[:i] + d[j:]


def _duplicate(rng, d, others):
    i, j = _span(rng, len(d))
    return d[:j] + d[i:j] * rng.randint(1, 4) + d[j:]


def insert_bytes(rng, d, others):
    i = rng.randrange(len(d) + 1)
    return d[:i] + rng.randbytes(rng.randint(1, 64)) + d[i:]


def _append(rng, d, others):
    return d + rng.randbytes(rng.randint(1, 256))


def _splice(rng, d, others):
    other = rng.choice(others) if others else d
    return d[: rng.randrange(len(d) + 1)] + other[rng.randrange(len(other) + 1) :]


def _repeat(rng, d, others):
    return d * rng.randint(2, 8)


BYTE_OPS = {
    "flip": _flip,
    "byte": _set_byte,
    "word": _set_word,
    "truncate": _truncate,
    "delete": _delete,
    "duplicate": _duplicate,
    "insert": insert_bytes,
    "append": _append,
    "splice": _splice,
    "repeat": _repeat,
}


def mutate_bytes(rng: random.Random, data: bytes, others: list[bytes]) -> tuple[str, bytes]:
    """One to three byte-level mutations stacked; returns their names and the result."""
    names = [rng.choice(list(BYTE_OPS)) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    for name in names:
        data = BYTE_OPS[name](rng, data, others)
    return "+".join(names), data


def frame_attack(rng: random.Random, body: bytes, limit: int, others: list[bytes]) -> tuple[str, bytes]:
    """A frame whose length prefix lies, overflows, is not minimal, or is followed by more than one frame."""
    n = len(body)
    attacks = {
        "short-length": lambda: uvarint(max(0, n - rng.randint(1, 8))) + body,
        "long-length": lambda: uvarint(n + rng.randint(1, 1000)) + body,
        "huge-length": lambda: uvarint(rng.choice((limit + 1, 2**31, 2**32 - 1, 2**63 - 1, 2**64 - 1))) + body[:64],
        "endless-varint": lambda: b"\xff" * rng.randint(9, 16) + body,
        "non-minimal": lambda: bytes([(n & 0x7F) | 0x80, n >> 7 | 0x80, 0x00]) + body,
        "empty-frame": lambda: b"\x00",
        "prefix-only": lambda: uvarint(n),
        "two-frames": lambda: frame(body) + frame(rng.choice(others) if others else body),
        "many-frames": lambda: frame(body) * rng.randint(2, 50),
    }
    name = rng.choice(list(attacks))
    return name, attacks[name]()


def _msgpack_replacement(rng: random.Random, old: object) -> tuple[str, object]:
    if type(old) is int:
        return "int", rng.choice((-1, 0, 1, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), old + 1, old - 1, 255, 256))
    if type(old) is bytes:
        return "bin", rng.choice(
            (b"", old[:-1], old + b"\0", old * 2, rng.randbytes(32), mutate_bytes(rng, old, [])[1])
        )
    if type(old) is str:
        return "str", rng.choice(("", old[:-1], old + "x", "\x00", "\u00e9" * rng.randint(1, 300), old.upper()))
    if type(old) is list:
        copy = list(old)
        if copy and rng.random() < 0.5:
            del copy[rng.randrange(len(copy))]
        else:
            copy.append(rng.choice(copy) if copy else 0)
        return "array", copy
    return "other", rng.choice((None, True, 1.5, {}, [], "x", b"x"))


def mutate_msgpack(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Re-encode a valid msgpack message with one element changed (value, type or length): canonical bytes
    that pass the size and encoding checks and reach the checks behind them."""
    value = msgpack.unpackb(data, raw=False)
    slots: list[tuple[list, int]] = []

    def walk(node: object) -> None:
        if type(node) is list:
            for i, item in enumerate(node):
                slots.append((node, i))
                walk(item)

    walk(value)
    if not slots:
        return "msgpack-whole", msgpack.packb(rng.choice((None, [], 0, "x")), use_bin_type=True)
    container, i = rng.choice(slots)
    if rng.random() < 0.15:
        what, container[i] = "retype", rng.choice((None, True, 1.5, {}, [], "x", b"x", 7))
    else:
        what, container[i] = _msgpack_replacement(rng, container[i])
    return f"msgpack-{what}@{i}", msgpack.packb(value, use_bin_type=True)
