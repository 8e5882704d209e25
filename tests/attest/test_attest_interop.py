"""Issue 7 item C14: exported envelopes checked by other people's code.

securesystemslib verifies the DSSE signature (keyid = the exporter's raw
Ed25519 public key in hex, see docs/attestation.md) and the in-toto
attestation library parses and validates the Statement. Neither shares code
with p2paudit.attest.intoto, so a PAE, base64 or statement-shape mistake of
ours fails here.
"""

from __future__ import annotations

import base64
import json

import pytest
from attest_helpers import key, make_signed
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey
from vectors_v1 import V1_DSSE_EXPORT

from p2paudit.attest.intoto import PAYLOAD_TYPE, PREDICATE_TYPE, PREDICATE_TYPE_V1, export_dsse
from p2paudit.attest.record import decode_signed

ALICE, BOB = key(1), key(2)
CASES = [
    dict(step=4),
    dict(step=4, verdict="mismatch", findings=("data",)),
    dict(step=4, verdict="mismatch", findings=("loss",)),
    dict(step=4, verdict="error"),
    dict(subject="init", verdict="mismatch"),
]


def sslib_key(public_key: bytes) -> SSlibKey:
    """The securesystemslib key for a p2paudit public key, under p2paudit's keyid convention (raw hex)."""
    hex_key = public_key.hex()
    return SSlibKey(keyid=hex_key, keytype="ed25519", scheme="ed25519", keyval={"public": hex_key})


def in_toto_statement(payload: bytes) -> Statement:
    """Parse a payload as the in-toto library's Statement (unknown fields refused) and validate it."""
    proto = json_format.Parse(payload.decode("utf-8"), statement_pb2.Statement())
    statement = Statement.copy_from_pb(proto)
    statement.validate()
    return statement


@pytest.mark.parametrize("case", CASES)
def test_securesystemslib_verifies_the_exported_envelope(case):
    signed = make_signed(ALICE, **case)
    envelope = Envelope.from_dict(json.loads(export_dsse(signed, BOB)))
    assert envelope.payload_type == PAYLOAD_TYPE
    accepted = envelope.verify([sslib_key(BOB.public_key)], threshold=1)
    assert list(accepted) == [BOB.public_key.hex()]
    # the verifier's own key did not sign the envelope; a key under another keyid is never tried
    with pytest.raises(VerificationError):
        envelope.verify([sslib_key(ALICE.public_key)], threshold=1)
    impostor = SSlibKey(
        keyid=BOB.public_key.hex(), keytype="ed25519", scheme="ed25519", keyval={"public": ALICE.public_key.hex()}
    )
    with pytest.raises(VerificationError):
        envelope.verify([impostor], threshold=1)


def test_securesystemslib_refuses_a_tampered_payload():
    text = json.loads(export_dsse(make_signed(ALICE, step=4), BOB))
    statement = json.loads(base64.b64decode(text["payload"]))
    statement["predicate"]["verdict"] = "mismatch"
    text["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    with pytest.raises(VerificationError):
        Envelope.from_dict(text).verify([sslib_key(BOB.public_key)], threshold=1)


@pytest.mark.parametrize("case", CASES)
def test_in_toto_library_validates_the_statement(case):
    signed = make_signed(ALICE, **case)
    envelope = Envelope.from_dict(json.loads(export_dsse(signed, BOB)))
    envelope.verify([sslib_key(BOB.public_key)], threshold=1)
    statement = in_toto_statement(envelope.payload)
    record = signed.attestation
    assert statement.pb.predicate_type == PREDICATE_TYPE
    (subject,) = statement.pb.subject
    assert subject.name.endswith("/init" if record.subject == "init" else "/step/4")
    assert subject.digest["sha256"] == (record.observed_output_digest or record.claimed_output_digest).hex()
    predicate = json_format.MessageToDict(statement.pb.predicate)
    assert predicate["findings"] == list(record.findings) and predicate["verdict"] == record.verdict
    # the native attestation inside the predicate verifies on its own
    assert decode_signed(base64.b64decode(predicate["signedAttestation"])) == signed


def test_both_libraries_accept_an_envelope_exported_from_a_v1_record():
    envelope = Envelope.from_dict(json.loads(V1_DSSE_EXPORT))
    envelope.verify([sslib_key(BOB.public_key)], threshold=1)
    assert in_toto_statement(envelope.payload).pb.predicate_type == PREDICATE_TYPE_V1


def test_the_in_toto_library_refuses_what_is_not_a_statement():
    payload = json.loads(base64.b64decode(json.loads(export_dsse(make_signed(ALICE), BOB))["payload"]))
    with pytest.raises(ValueError, match="At least one subject"):
        in_toto_statement(json.dumps(dict(payload, subject=[])).encode())
    with pytest.raises(ValueError, match="Wrong statement type"):
        in_toto_statement(json.dumps(dict(payload, _type="https://in-toto.io/Statement/v0.1")).encode())
