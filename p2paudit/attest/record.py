"""Attestation records and their canonical, signed msgpack bytes: the format is docs/attestation.md.

Two body versions share one envelope:

- version 2 (record_v2.AttestationV2, alias `Attestation`): what every new
  record is. It names its subject (a step, or the initial state), carries
  the claimed and observed data digest, output digest and loss, and the
  findings, so every outcome of a replay can be signed and says what was found.
- version 1 (record_v1.AttestationV1): read and verified forever, because
  old ledgers hold v1 leaves; never signed anew.

The signed envelope is the msgpack array [1, body (bin), signature (bin 64)].
The Ed25519 signature covers DOMAINS[body version] + body, so a signature can
never be replayed as one on anything else the key signs (manifests,
checkpoints), nor a body of one version under the other's domain. The
envelope is at most MAX_SIGNED_SIZE bytes, checked before parsing anything.
Decoding re-encodes what it parsed and refuses the input unless the bytes are
identical: one value, one encoding.

Both record classes answer the same questions (run_id, step, subject,
index_step, verifier, verdict, claimed/observed_output_digest, input_digest,
result(), result_digest(), to_dict()), so the store and queries need not
know the version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from p2paudit.attest.codec import (  # noqa: F401 (re-exported)
    DIGEST_SIZE,
    MAX_SIGNED_SIZE,
    SIGNATURE_SIZE,
    as_bytes,
    pack,
    unpack,
)
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record_v1 import DOMAIN_V1, VERSION_1, AttestationV1, encode_v1, record_v1_from_fields
from p2paudit.attest.record_v2 import (  # noqa: F401 (re-exported)
    DOMAIN_V2,
    FINDINGS,
    SUBJECTS,
    VERDICTS,
    VERSION_2,
    AttestationV2,
    encode_v2,
    record_v2_from_fields,
)
from p2paudit.errors import InternalError
from p2paudit.identity import Identity, sign, verify_signature

VERSION = VERSION_2  # what new records are
DOMAIN = DOMAIN_V2  # the domain new records are signed under
DOMAINS = {VERSION_1: DOMAIN_V1, VERSION_2: DOMAIN_V2}
ENVELOPE_VERSION = 1  # the envelope did not change; the body says its own version

Attestation = AttestationV2  # the record new attestations are built as
AnyAttestation = AttestationV1 | AttestationV2  # what decoding may return


def encode_attestation(attestation: AnyAttestation) -> bytes:
    """The canonical body bytes of a (valid, by construction) record of either version."""
    if type(attestation) is AttestationV2:
        return encode_v2(attestation)
    if type(attestation) is AttestationV1:
        return encode_v1(attestation)
    raise AttestationError(f"not an attestation record: {type(attestation).__name__}")


def decode_attestation(data: bytes) -> AnyAttestation:
    """Parse canonical body bytes of version 1 or 2; AttestationError on anything else."""
    data = as_bytes(data)
    value = unpack(data, "attestation body")
    if type(value) is not list:
        raise AttestationError(f"attestation body is a msgpack {type(value).__name__}, want an array")
    version = value[0] if value else None
    if type(version) is not int or version not in DOMAINS:
        raise AttestationError(f"attestation version {version!r} is unknown, want one of {sorted(DOMAINS)}")
    record = record_v1_from_fields(value) if version == VERSION_1 else record_v2_from_fields(value)
    if encode_attestation(record) != data:
        raise AttestationError("attestation body is not canonically encoded")
    return record


@dataclass(frozen=True)
class SignedAttestation:
    """A record, its exact body bytes and the verifier's signature over DOMAINS[version] + body.

    `encoded` is the canonical envelope: the bytes that are gossiped and that
    the ledger stores as a leaf.
    """

    attestation: AnyAttestation
    body: bytes
    signature: bytes
    encoded: bytes

    @property
    def verifier(self) -> bytes:
        return self.attestation.verifier


def sign_attestation(identity: Identity, attestation: AttestationV2) -> SignedAttestation:
    """Sign a version-2 record with the node key; the record must name that key as verifier.

    Version-1 records are refused: they are read, never made. Both refusals are
    the caller's bug, never bad input, hence InternalError (exit 3).
    """
    if type(attestation) is not AttestationV2:
        raise InternalError(f"only version {VERSION} records are signed, not {type(attestation).__name__}")
    if attestation.verifier != identity.public_key:
        raise InternalError(
            f"attestation names verifier {attestation.verifier.hex()[:16]}..., "
            f"but the signing key is {identity.public_key.hex()[:16]}..."
        )
    body = encode_v2(attestation)
    signature = sign(identity, DOMAIN_V2 + body)
    encoded = pack([ENVELOPE_VERSION, body, signature])
    return SignedAttestation(attestation, body, signature, encoded)


def decode_signed(data: bytes) -> SignedAttestation:
    """Parse a canonical envelope (v1 or v2 body) and verify its signature under the body's domain.

    Raises AttestationError for an oversized, malformed, truncated or
    non-canonical envelope or body, an unknown version, or a bad signature.
    """
    data = as_bytes(data)
    value = unpack(data, "signed attestation")
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
    if pack(value) != data:
        raise AttestationError("signed attestation is not canonically encoded")
    record = decode_attestation(body)
    if not verify_signature(record.verifier, signature, DOMAINS[record.version] + body):
        raise AttestationError(
            f"bad signature on version-{record.version} attestation for {record.subject} {record.step} "
            f"by {record.verifier.hex()[:16]}..."
        )
    return SignedAttestation(record, body, signature, data)


def attestation_to_dict(attestation: AnyAttestation) -> dict[str, Any]:
    """A JSON-ready view of either version: digests as "sha256:<hex>", keys and run id as hex."""
    return attestation.to_dict()
