"""Attestation records and their canonical, signed msgpack bytes.

Wire format, version 1
----------------------
The body is a msgpack **array of 14 elements in this fixed order** (an array,
not a map: no key order to agree on, and 14 fewer strings per record):

    0  version                 int, == 1
    1  run_id                  bin, 32 bytes (the digest of the run manifest body)
    2  step                    int, 0 <= step < 2**63
    3  input_digest            bin, 32 (state n)
    4  data_digest             bin, 32 (data slice n)
    5  claimed_output_digest   bin, 32 (the published state n+1)
    6  observed_output_digest  bin, 32, or nil when and only when verdict is "error"
    7  verdict                 str, "match" | "mismatch" | "error"
    8  engine_version          str, 1..64 printable ASCII
    9  arithmetic_version      int, 0 <= v < 2**32
    10 backend                 str, 1..32 printable ASCII ("reference", "cpu", "triton")
    11 hardware                str, 0..256 printable ASCII
    12 time_ms                 int, unix time in milliseconds, 0 <= t < 2**63
    13 verifier                bin, 32 (the Ed25519 public key that signs it)

Verdicts are tied to the digests: "match" requires observed == claimed,
"mismatch" requires observed != claimed, and "error" (the replay could not
produce a state: missing checkpoint, crash) requires observed to be nil.
Strings are printable ASCII so that one value has one encoding (no Unicode
normalisation questions) and nothing printed from a record can move a cursor.

Canonical: msgpack's smallest encoding of every int, str and bin (bin type
for bytes, never str; no floats, maps or ext types anywhere). Decoding
re-encodes what it parsed and rejects the input unless the bytes are
identical, which catches every non-minimal length or int form at once.

The signed envelope is the msgpack array [1, body (bin), signature (bin 64)];
the Ed25519 signature covers DOMAIN + body, so an attestation signature can
never be replayed as a signature on anything else the key signs (manifests,
checkpoints). The whole envelope is at most MAX_SIGNED_SIZE bytes; this is
checked before parsing anything.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgpack

from p2paudit.attest.errors import AttestationError
from p2paudit.identity import Identity, sign, verify_signature

VERSION = 1
ENVELOPE_VERSION = 1
DOMAIN = b"p2paudit/attestation/v1\x00"
MAX_SIGNED_SIZE = 4096
DIGEST_SIZE = 32
SIGNATURE_SIZE = 64
VERDICTS = ("match", "mismatch", "error")
_MAX_INT63 = 2**63
_STR_LIMITS = {"engine_version": (1, 64), "backend": (1, 32), "hardware": (0, 256)}
_BODY_LEN = 14


def _check_digest(name: str, value: Any) -> None:
    if type(value) is not bytes:
        raise AttestationError(f"attestation {name} is {type(value).__name__}, want {DIGEST_SIZE} bytes")
    if len(value) != DIGEST_SIZE:
        raise AttestationError(f"attestation {name} has {len(value)} bytes, want {DIGEST_SIZE}")


def _check_int(name: str, value: Any, limit: int) -> None:
    # type() not isinstance(): a bool is an int to Python but not to the format.
    if type(value) is not int:
        raise AttestationError(f"attestation {name} is {type(value).__name__}, want an integer")
    if not 0 <= value < limit:
        raise AttestationError(f"attestation {name} is {value}, want 0 <= {name} < {limit}")


def _check_text(name: str, value: Any) -> None:
    low, high = _STR_LIMITS[name]
    if type(value) is not str:
        raise AttestationError(f"attestation {name} is {type(value).__name__}, want a string")
    if not low <= len(value) <= high:
        raise AttestationError(f"attestation {name} has {len(value)} characters, want {low}..{high}")
    # isascii and isprintable together are exactly 0x20..0x7e, in C rather than a Python loop.
    if not (value.isascii() and value.isprintable()):
        raise AttestationError(f"attestation {name} {value[:40]!r} is not printable ASCII")


@dataclass(frozen=True)
class Attestation:
    """One verifier's signed statement about one replayed step.

    Constructing a record validates every field (types, sizes, verdict rules);
    an invalid record cannot exist, so encoding never fails.
    """

    run_id: bytes
    step: int
    input_digest: bytes
    data_digest: bytes
    claimed_output_digest: bytes
    observed_output_digest: bytes | None
    verdict: str
    engine_version: str
    arithmetic_version: int
    backend: str
    hardware: str
    time_ms: int
    verifier: bytes
    version: int = VERSION

    def __post_init__(self) -> None:
        if type(self.version) is not int or self.version != VERSION:
            raise AttestationError(f"attestation version {self.version!r} is unknown, want {VERSION}")
        for name in ("run_id", "input_digest", "data_digest", "claimed_output_digest", "verifier"):
            _check_digest(name, getattr(self, name))
        _check_int("step", self.step, _MAX_INT63)
        _check_int("arithmetic_version", self.arithmetic_version, 2**32)
        _check_int("time_ms", self.time_ms, _MAX_INT63)
        for name in _STR_LIMITS:
            _check_text(name, getattr(self, name))
        self._check_verdict()

    def _check_verdict(self) -> None:
        if self.verdict not in VERDICTS:
            raise AttestationError(f"attestation verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")
        observed = self.observed_output_digest
        if self.verdict == "error":
            if observed is not None:
                raise AttestationError("attestation with verdict error carries an observed digest; want none")
            return
        if observed is None:
            raise AttestationError(f"attestation with verdict {self.verdict} has no observed digest")
        _check_digest("observed_output_digest", observed)
        if self.verdict == "match" and observed != self.claimed_output_digest:
            raise AttestationError("attestation says match but observed digest differs from claimed")
        if self.verdict == "mismatch" and observed == self.claimed_output_digest:
            raise AttestationError("attestation says mismatch but observed digest equals claimed")

    def result(self) -> tuple:
        """What the verifier asserts about the step, without time or machine details.

        Two records of one key for one (run, step) with different results are
        an equivocation; equal results signed twice (a re-run) are not.
        """
        return (self.input_digest, self.data_digest, self.claimed_output_digest, self.verdict,
                self.observed_output_digest)

    def result_digest(self) -> bytes:
        """SHA-256 of the canonical msgpack of `result()` (indexed by the store)."""
        return hashlib.sha256(msgpack.packb(list(self.result()), use_bin_type=True)).digest()


_FIELD_ORDER = ("version", "run_id", "step", "input_digest", "data_digest", "claimed_output_digest",
                "observed_output_digest", "verdict", "engine_version", "arithmetic_version", "backend",
                "hardware", "time_ms", "verifier")


def encode_attestation(attestation: Attestation) -> bytes:
    """The canonical body bytes of a (valid, by construction) record."""
    return msgpack.packb([getattr(attestation, name) for name in _FIELD_ORDER], use_bin_type=True)


def _unpack(data: bytes, what: str) -> Any:
    """Parse exactly one msgpack value; every parser failure becomes AttestationError."""
    if type(data) is not bytes:
        raise AttestationError(f"{what} is {type(data).__name__}, want bytes")
    if len(data) > MAX_SIGNED_SIZE:
        raise AttestationError(f"{what} has {len(data)} bytes, more than the limit {MAX_SIGNED_SIZE}")
    try:
        # No maps or ext types in the format, so they are refused by the parser itself.
        return msgpack.unpackb(data, raw=False, use_list=True, max_map_len=0, max_ext_len=0,
                               max_array_len=64, max_bin_len=MAX_SIGNED_SIZE, max_str_len=MAX_SIGNED_SIZE)
    except msgpack.ExtraData as exc:
        raise AttestationError(f"{what} has {len(exc.extra)} trailing bytes") from None
    except (ValueError, TypeError, OverflowError, UnicodeDecodeError, msgpack.UnpackException) as exc:
        raise AttestationError(f"{what} is not valid msgpack: {type(exc).__name__}: {str(exc)[:80]}") from None


def _as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    # Network buffers arrive as bytearray or memoryview; the record keeps immutable bytes.
    return bytes(data) if isinstance(data, (bytearray, memoryview)) else data


def decode_attestation(data: bytes) -> Attestation:
    """Parse canonical body bytes; AttestationError on anything else."""
    data = _as_bytes(data)
    value = _unpack(data, "attestation body")
    if type(value) is not list:
        raise AttestationError(f"attestation body is a msgpack {type(value).__name__}, want an array")
    if len(value) != _BODY_LEN:
        raise AttestationError(f"attestation body has {len(value)} fields, want {_BODY_LEN}")
    if type(value[0]) is not int or value[0] != VERSION:
        raise AttestationError(f"attestation version {value[0]!r} is unknown, want {VERSION}")
    record = Attestation(**dict(zip(_FIELD_ORDER, value)))
    if encode_attestation(record) != data:
        raise AttestationError("attestation body is not canonically encoded")
    return record


@dataclass(frozen=True)
class SignedAttestation:
    """A record, its exact body bytes and the verifier's signature over DOMAIN + body.

    `encoded` is the canonical envelope: the bytes that are gossiped and that
    the ledger stores as a leaf.
    """

    attestation: Attestation
    body: bytes
    signature: bytes
    encoded: bytes

    @property
    def verifier(self) -> bytes:
        return self.attestation.verifier


def sign_attestation(identity: Identity, attestation: Attestation) -> SignedAttestation:
    """Sign a record with the node key; the record must name that key as verifier."""
    if attestation.verifier != identity.public_key:
        raise AttestationError(
            f"attestation names verifier {attestation.verifier.hex()[:16]}..., "
            f"but the signing key is {identity.public_key.hex()[:16]}..."
        )
    body = encode_attestation(attestation)
    signature = sign(identity, DOMAIN + body)
    encoded = msgpack.packb([ENVELOPE_VERSION, body, signature], use_bin_type=True)
    return SignedAttestation(attestation, body, signature, encoded)


def decode_signed(data: bytes) -> SignedAttestation:
    """Parse a canonical envelope and verify its signature.

    Raises AttestationError for an oversized, malformed, truncated or
    non-canonical envelope or body, an unknown version, or a bad signature.
    """
    data = _as_bytes(data)
    value = _unpack(data, "signed attestation")
    if type(value) is not list or len(value) != 3:
        shape = f"array of {len(value)}" if type(value) is list else type(value).__name__
        raise AttestationError(f"signed attestation is a msgpack {shape}, want an array of 3")
    version, body, signature = value
    if type(version) is not int or version != ENVELOPE_VERSION:
        raise AttestationError(f"signed attestation envelope version {version!r} is unknown, want {ENVELOPE_VERSION}")
    if type(body) is not bytes:
        raise AttestationError(f"signed attestation body is {type(body).__name__}, want bytes")
    if type(signature) is not bytes or len(signature) != SIGNATURE_SIZE:
        size = len(signature) if type(signature) is bytes else type(signature).__name__
        raise AttestationError(f"signed attestation signature has {size} bytes, want {SIGNATURE_SIZE}")
    if msgpack.packb(value, use_bin_type=True) != data:
        raise AttestationError("signed attestation is not canonically encoded")
    record = decode_attestation(body)
    if not verify_signature(record.verifier, signature, DOMAIN + body):
        raise AttestationError(
            f"bad signature on attestation for step {record.step} by {record.verifier.hex()[:16]}..."
        )
    return SignedAttestation(record, body, signature, data)


def attestation_to_dict(attestation: Attestation) -> dict[str, Any]:
    """A JSON-ready view: digests as "sha256:<hex>", keys and run id as hex."""

    def digest(value: bytes | None) -> str | None:
        return None if value is None else "sha256:" + value.hex()

    return {
        "version": attestation.version,
        "run_id": attestation.run_id.hex(),
        "step": attestation.step,
        "input_digest": digest(attestation.input_digest),
        "data_digest": digest(attestation.data_digest),
        "claimed_output_digest": digest(attestation.claimed_output_digest),
        "observed_output_digest": digest(attestation.observed_output_digest),
        "verdict": attestation.verdict,
        "engine_version": attestation.engine_version,
        "arithmetic_version": attestation.arithmetic_version,
        "backend": attestation.backend,
        "hardware": attestation.hardware,
        "time_ms": attestation.time_ms,
        "verifier": attestation.verifier.hex(),
    }
