"""The canonical bytes of every p2paudit message (node.wire names the messages): limits, errors, primitives.

Each message is one msgpack array that starts with a magic string and a
version: ["p2paudit/<kind>", 1, ...]. Decoding is strict, as for
attestations (attest.codec): the size limit is checked before anything is
parsed, maps, ext types and floats are refused by type, counts are bounded,
no bytes may trail, and the parsed value is re-encoded and compared, so each
value has exactly one encoding. Everything raises WireError (exit code 2)
with a one-line message that carries the numbers.
"""

from __future__ import annotations

from typing import Any

import msgpack

from p2paudit.attest.codec import MAX_SIGNED_SIZE
from p2paudit.errors import InputError, NetworkError

VERSION = 1
MAGIC_BATCH = "p2paudit/batch"
MAGIC_EVIDENCE = "p2paudit/evidence"
MAGIC_SYNC = "p2paudit/sync"
MAGIC_WITNESS = "p2paudit/witness"

SYNC_PROTOCOL = "/p2paudit/sync/1.0.0"
WITNESS_PROTOCOL = "/p2paudit/witness/1.0.0"
# "Are you covered too?" (--until-covered): an empty request; one byte in reply, 0x00 no, 0x01 yes,
# or 0x02 followed by a refusal's UTF-8 reason.
SETTLED_PROTOCOL = "/p2paudit/settled/1.0.0"
EVIDENCE_TOPIC = "/p2paudit/evidence/v1"
MESSAGE_ID_DOMAIN = b"p2paudit/message-id/v1\x00"

HASH_SIZE = 32
MAX_INT = 2**63  # sizes, positions, counts and steps: 0 <= x < 2^63
MAX_BATCH = 256  # attestations per gossip message
MAX_BATCH_BYTES = 256 * 1024
MAX_NOTE_BYTES = 8192  # a signed checkpoint note (a few hundred bytes with one signature)
MAX_EVIDENCE_BYTES = 2 * MAX_NOTE_BYTES + 64
MAX_RUNS = 1024  # runs listed in a status response
MAX_STATUS_BYTES = MAX_NOTE_BYTES + MAX_RUNS * 48 + 64
MAX_PAGE = 256  # entries per sync page
MAX_PROOF_HASHES = 64  # per side of a range proof, and in a consistency proof (C2SP: at most 63)
MAX_PAGE_BYTES = MAX_PAGE * (MAX_SIGNED_SIZE + 3) + 2 * MAX_PROOF_HASHES * (HASH_SIZE + 2) + 64
MAX_SYNC_REQUEST_BYTES = 64
MAX_TEXT = 200  # bytes (UTF-8) of a refusal's reason: what the decoders check
MAX_WITNESS_REQUEST_BYTES = MAX_NOTE_BYTES + MAX_PROOF_HASHES * (HASH_SIZE + 2) + 64
MAX_WITNESS_RESPONSE_BYTES = 1024

EVIDENCE_KINDS = ("dispute", "equivocation", "split_view")
# Witness response codes, each with the C2SP tlog-witness HTTP status it stands for.
WITNESS_OK = 0  # 200: text is the cosignature line
WITNESS_MALFORMED = 1  # 400: the request does not decode
WITNESS_UNKNOWN_LOG = 2  # 404: origin not a log this witness follows
WITNESS_BAD_SIGNATURE = 3  # 403: no valid signature by the log's key
WITNESS_OLD_SIZE_TOO_LARGE = 4  # 400: old size above the checkpoint's size
WITNESS_OLD_SIZE_MISMATCH = 5  # 409: old size is not the witness's latest; `size` says which it is
WITNESS_BAD_PROOF = 6  # 422: the consistency proof does not verify
WITNESS_ROOT_CONFLICT = 7  # 409: same size, other root (a split view, kept as evidence)
WITNESS_UNAVAILABLE = 8  # 503: refused before any check (busy, oversize frame, timed out, internal error)
WITNESS_CODES = range(9)


class PeerRefused(NetworkError):
    """A peer answered with a refusal and its reason: it declined, it did not lie (never banned for it)."""


class WireError(InputError):
    """A message is malformed, oversized, non-canonical or of an unknown kind or version (exit code 2)."""


# -- primitives --------------------------------------------------------------------------------------------


def pack(value: object) -> bytes:
    # msgpack ships no annotations (its packb is Any to mypy); packb returns bytes.
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def unpack_message(data: Any, limit: int, magic: str, what: str, max_items: int = 0) -> list[Any]:
    """Parse one canonical message of at most `limit` bytes; return its fields after magic and version.
    Arrays hold at most max(max_items, the largest list any message here allows) items."""
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if type(data) is not bytes:
        raise WireError(f"{what} is {type(data).__name__}, want bytes")
    if len(data) > limit:
        raise WireError(f"{what} has {len(data)} bytes, more than the limit {limit}")
    try:
        value = msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            strict_map_key=True,
            max_map_len=0,
            max_ext_len=0,
            max_array_len=max(MAX_BATCH, MAX_PAGE, MAX_RUNS, MAX_PROOF_HASHES, max_items),
            max_bin_len=limit,
            max_str_len=limit,
        )
    except msgpack.ExtraData as exc:
        raise WireError(f"{what} has {len(exc.extra)} trailing bytes") from None
    except (ValueError, TypeError, OverflowError, UnicodeDecodeError, msgpack.UnpackException) as exc:
        raise WireError(f"{what} is not valid msgpack: {type(exc).__name__}: {str(exc)[:80]}") from None
    if type(value) is not list or len(value) < 2:
        raise WireError(f"{what} is not a msgpack array starting with a magic and a version")
    if value[0] != magic or type(value[0]) is not str:
        raise WireError(f"{what} magic is {str(value[0])[:40]!r}, want {magic!r}")
    if type(value[1]) is not int or value[1] != VERSION:
        raise WireError(f"{what} version is {value[1]!r}, want {VERSION}")
    if pack(value) != data:
        raise WireError(f"{what} is not canonically encoded")
    return value[2:]


def check_fields(fields: list[Any], count: int, what: str) -> None:
    if len(fields) != count:
        raise WireError(f"{what} has {len(fields) + 2} fields, want {count + 2}")


def check_int(value: Any, what: str, low: int = 0, high: int = MAX_INT) -> int:
    """An int (never a bool) with low <= value < high."""
    if type(value) is not int:
        raise WireError(f"{what} is {type(value).__name__}, want an integer")
    if not low <= value < high:
        raise WireError(f"{what} is {value}, want {low} <= {what} < {high}")
    return value


def check_bin(value: Any, what: str, low: int, high: int) -> bytes:
    """Bytes (msgpack bin) of low..high bytes."""
    if type(value) is not bytes:
        raise WireError(f"{what} is {type(value).__name__}, want bytes")
    if not low <= len(value) <= high:
        raise WireError(f"{what} has {len(value)} bytes, want {low}..{high}")
    return value


def clip_text(text: str, high: int = MAX_TEXT) -> str:
    """The longest prefix of `text` whose UTF-8 form has at most `high` bytes (never half a character).

    A refusal's reason repeats request fields a peer chose; clipped by characters, a non-ASCII one would
    pass `high` bytes and the requester's decoder (check_text) would take the honest answer for a bad one.
    """
    data = text.encode("utf-8")
    if len(data) <= high:
        return text
    return data[:high].decode("utf-8", errors="ignore")


def check_text(value: Any, what: str, high: int) -> str:
    if type(value) is not str:
        raise WireError(f"{what} is {type(value).__name__}, want a string")
    if len(value.encode("utf-8")) > high:
        raise WireError(f"{what} has {len(value.encode('utf-8'))} bytes, more than {high}")
    return value


def check_list(value: Any, what: str, low: int, high: int) -> list[Any]:
    if type(value) is not list:
        raise WireError(f"{what} is {type(value).__name__}, want an array")
    if not low <= len(value) <= high:
        raise WireError(f"{what} has {len(value)} items, want {low}..{high}")
    return value


def check_hashes(value: Any, what: str) -> tuple[bytes, ...]:
    items = check_list(value, what, 0, MAX_PROOF_HASHES)
    return tuple(check_bin(h, f"{what} hash {i}", HASH_SIZE, HASH_SIZE) for i, h in enumerate(items))
