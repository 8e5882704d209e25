"""Export and import attestations as in-toto Statements (v1) in DSSE envelopes (docs/attestation.md).

The statement: one subject, the thing attested, named
`p2paudit:run/<run hex>/step/<n>` (a step) or `p2paudit:run/<run hex>/init`
(the initial state, v2 records only), with the sha256 digest of the state the
verifier observed (after the step, or rebuilt from the recipe); for verdict
"error", which observed nothing, the claimed digest: the state it failed to
check (the predicate's verdict says so). The predicate is the record's JSON
view (record.attestation_to_dict: for v2 the subject, findings, claimed and
observed data digest, output digest and loss bits) plus `signedAttestation`:
the base64 of the native signed envelope, byte for byte what the ledger
stores. The predicate type names the record version: PREDICATE_TYPES.

Two signatures, two jobs. The DSSE signature (Ed25519 over PAE) is made by
whoever exports the envelope, often not the verifier (a node can export any
entry of its ledger). Its `keyid` is the exporter's raw Ed25519 public key as
64 lowercase hex digits (not securesystemslib's default keyid, a hash of the
key's JSON form: give an SSlibKey this keyid explicitly to verify with it).
The native signature inside is the verifier's and is what anybody's trust
rests on. Import checks both, and also that the statement says exactly what
the embedded record says, so the JSON can never disagree with the signed bytes.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record import SignedAttestation, attestation_to_dict, decode_signed
from p2paudit.errors import InputError
from p2paudit.identity import Identity, parse_public_key_hex, sign, verify_signature

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE_V1 = "https://p2paudit.dev/attestation/step/v1"  # v1 records (exported before v2 existed)
PREDICATE_TYPE = "https://p2paudit.dev/attestation/v2"  # v2 records: every new export
PREDICATE_TYPES = {1: PREDICATE_TYPE_V1, 2: PREDICATE_TYPE}
# A statement is ~1.5 KiB; the bound keeps a hostile file from being parsed at all.
MAX_ENVELOPE_SIZE = 64 * 1024


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE pre-authentication encoding: "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def subject_name(run_id: bytes, step: int, subject: str = "step") -> str:
    """The in-toto subject name of one step of one run, or of its initial state (subject "init")."""
    if subject == "init":
        return f"p2paudit:run/{run_id.hex()}/init"
    return f"p2paudit:run/{run_id.hex()}/step/{step}"


def build_statement(signed: SignedAttestation) -> dict[str, Any]:
    """The in-toto Statement v1 for a signed attestation of either record version."""
    record = signed.attestation
    state = record.observed_output_digest or record.claimed_output_digest
    predicate = attestation_to_dict(record)
    predicate["signedAttestation"] = base64.b64encode(signed.encoded).decode("ascii")
    name = subject_name(record.run_id, record.step, record.subject)
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": state.hex()}}],
        "predicateType": PREDICATE_TYPES[record.version],
        "predicate": predicate,
    }


def export_dsse(signed: SignedAttestation, exporter: Identity) -> str:
    """A DSSE envelope (JSON text) holding the statement, signed by `exporter`."""
    payload = json.dumps(build_statement(signed), sort_keys=True, separators=(",", ":")).encode("utf-8")
    signature = sign(exporter, pae(PAYLOAD_TYPE, payload))
    envelope = {
        "payloadType": PAYLOAD_TYPE,
        "payload": base64.b64encode(payload).decode("ascii"),
        "signatures": [{"keyid": exporter.public_key.hex(), "sig": base64.b64encode(signature).decode("ascii")}],
    }
    return json.dumps(envelope, indent=2, sort_keys=True) + "\n"


@dataclass(frozen=True)
class ImportedEnvelope:
    """A verified envelope: the native signed attestation and who signed the envelope."""

    signed: SignedAttestation
    envelope_signers: tuple[bytes, ...]


def _b64(text: Any, what: str) -> bytes:
    # DSSE: verifiers must accept standard and URL-safe base64.
    if not isinstance(text, str):
        raise AttestationError(f"DSSE {what} is {type(text).__name__}, want a base64 string")
    alphabet = "-_" if ("-" in text or "_" in text) else "+/"
    try:
        return base64.b64decode(text, altchars=alphabet.encode(), validate=True)
    except (binascii.Error, ValueError):
        raise AttestationError(f"DSSE {what} is not valid base64") from None


def _parse_envelope(data: bytes) -> dict[str, Any]:
    if len(data) > MAX_ENVELOPE_SIZE:
        raise AttestationError(f"DSSE envelope has {len(data)} bytes, more than the limit {MAX_ENVELOPE_SIZE}")
    try:
        envelope = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise AttestationError(f"DSSE envelope is not JSON: {str(exc)[:80]}") from None
    if not isinstance(envelope, dict):
        raise AttestationError(f"DSSE envelope is a JSON {type(envelope).__name__}, want an object")
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise AttestationError(f"DSSE payloadType {str(envelope.get('payloadType'))[:80]!r}, want {PAYLOAD_TYPE}")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise AttestationError("DSSE envelope has no signatures")
    return envelope


def _envelope_signers(signatures: list[Any], message: bytes) -> tuple[bytes, ...]:
    """Keys whose signature over `message` checks; keyid is only the hint of which key."""
    good = []
    for number, entry in enumerate(signatures):
        if not isinstance(entry, dict) or not isinstance(entry.get("keyid"), str):
            raise AttestationError(f"DSSE signature {number} has no keyid (want the signer's hex public key)")
        try:
            key = parse_public_key_hex(entry["keyid"])
        except InputError as exc:
            raise AttestationError(f"DSSE signature {number} keyid: {exc}") from None
        if verify_signature(key, _b64(entry.get("sig"), f"signature {number}"), message):
            good.append(key)
    return tuple(good)


def import_dsse(data: bytes) -> ImportedEnvelope:
    """Verify a DSSE envelope made by `export_dsse` and return the attestation inside.

    Raises AttestationError if the envelope is oversized or malformed, no
    signature checks, the embedded native attestation is bad, or the
    statement differs in any way from the one the embedded record implies.
    """
    envelope = _parse_envelope(data)
    payload = _b64(envelope.get("payload"), "payload")
    signers = _envelope_signers(envelope["signatures"], pae(PAYLOAD_TYPE, payload))
    if not signers:
        raise AttestationError(f"no valid DSSE signature among {len(envelope['signatures'])}")
    try:
        statement = json.loads(payload)
    except (ValueError, RecursionError):
        raise AttestationError("DSSE payload is not a JSON statement") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise AttestationError(f"DSSE payload is not an in-toto Statement ({STATEMENT_TYPE})")
    if statement.get("predicateType") not in PREDICATE_TYPES.values():
        raise AttestationError(
            f"statement predicateType {str(statement.get('predicateType'))[:80]!r}, "
            f"want one of {', '.join(PREDICATE_TYPES.values())}"
        )
    predicate = statement.get("predicate")
    if not isinstance(predicate, dict):
        raise AttestationError("statement predicate is not an object")
    signed = decode_signed(_b64(predicate.get("signedAttestation"), "predicate signedAttestation"))
    if statement != build_statement(signed):
        raise AttestationError("statement does not match the signed attestation it carries")
    return ImportedEnvelope(signed, signers)
