"""Field checks and the bounded msgpack parser shared by every attestation version (see docs/attestation.md).

Everything here raises AttestationError, never a parser's own exception, so
a hostile byte string can only ever be refused, with a message that says why.
"""

from __future__ import annotations

from typing import Any

import msgpack

from p2paudit.attest.errors import AttestationError

MAX_SIGNED_SIZE = 4096  # the whole signed envelope; checked before anything is parsed
DIGEST_SIZE = 32
SIGNATURE_SIZE = 64
MAX_INT63 = 2**63
MAX_UINT64 = 2**64
# (min, max) characters of each text field; printable ASCII only (see check_text).
STR_LIMITS = {"engine_version": (1, 64), "backend": (1, 32), "hardware": (0, 256)}


def check_digest(name: str, value: Any) -> None:
    """A raw SHA-256 digest or Ed25519 public key: exactly 32 bytes of type bytes."""
    if type(value) is not bytes:
        raise AttestationError(f"attestation {name} is {type(value).__name__}, want {DIGEST_SIZE} bytes")
    if len(value) != DIGEST_SIZE:
        raise AttestationError(f"attestation {name} has {len(value)} bytes, want {DIGEST_SIZE}")


def check_optional_digest(name: str, value: Any) -> None:
    if value is not None:
        check_digest(name, value)


def check_int(name: str, value: Any, limit: int) -> None:
    """An int with 0 <= value < limit."""
    # type() not isinstance(): a bool is an int to Python but not to the format.
    if type(value) is not int:
        raise AttestationError(f"attestation {name} is {type(value).__name__}, want an integer")
    if not 0 <= value < limit:
        raise AttestationError(f"attestation {name} is {value}, want 0 <= {name} < {limit}")


def check_text(name: str, value: Any) -> None:
    """A text field within STR_LIMITS[name], printable ASCII (0x20..0x7e) only."""
    low, high = STR_LIMITS[name]
    if type(value) is not str:
        raise AttestationError(f"attestation {name} is {type(value).__name__}, want a string")
    if not low <= len(value) <= high:
        raise AttestationError(f"attestation {name} has {len(value)} characters, want {low}..{high}")
    # isascii and isprintable together are exactly 0x20..0x7e, in C rather than a Python loop.
    if not (value.isascii() and value.isprintable()):
        raise AttestationError(f"attestation {name} {value[:40]!r} is not printable ASCII")


def check_common(record: Any) -> None:
    """The fields every version shares: run id, step, versions, machine text, time, verifier."""
    for name in ("run_id", "verifier"):
        check_digest(name, getattr(record, name))
    check_int("step", record.step, MAX_INT63)
    check_int("arithmetic_version", record.arithmetic_version, 2**32)
    check_int("time_ms", record.time_ms, MAX_INT63)
    for name in STR_LIMITS:
        check_text(name, getattr(record, name))


def unpack(data: bytes, what: str) -> Any:
    """Parse exactly one msgpack value of at most MAX_SIGNED_SIZE bytes; every failure becomes AttestationError."""
    if type(data) is not bytes:
        raise AttestationError(f"{what} is {type(data).__name__}, want bytes")
    if len(data) > MAX_SIGNED_SIZE:
        raise AttestationError(f"{what} has {len(data)} bytes, more than the limit {MAX_SIGNED_SIZE}")
    try:
        # No maps or ext types in any version, so the parser itself refuses them.
        return msgpack.unpackb(
            data,
            raw=False,
            use_list=True,
            max_map_len=0,
            max_ext_len=0,
            max_array_len=64,
            max_bin_len=MAX_SIGNED_SIZE,
            max_str_len=MAX_SIGNED_SIZE,
        )
    except msgpack.ExtraData as exc:
        raise AttestationError(f"{what} has {len(exc.extra)} trailing bytes") from None
    except (ValueError, TypeError, OverflowError, UnicodeDecodeError, msgpack.UnpackException) as exc:
        raise AttestationError(f"{what} is not valid msgpack: {type(exc).__name__}: {str(exc)[:80]}") from None


def pack(value: Any) -> bytes:
    """msgpack's smallest encoding of every int, str and bin (bytes as bin, never str)."""
    packed: bytes = msgpack.packb(value, use_bin_type=True)
    return packed


def as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    # Network buffers arrive as bytearray or memoryview; records keep immutable bytes.
    return bytes(data) if isinstance(data, (bytearray, memoryview)) else data


def digest_text(value: bytes | None) -> str | None:
    """A digest as "sha256:<hex>", None as None (the JSON views)."""
    return None if value is None else "sha256:" + value.hex()
