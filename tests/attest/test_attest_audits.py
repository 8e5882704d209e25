"""Attestations built from step audits: verdict rules carried over, hardware text made printable."""

from __future__ import annotations

import dataclasses

import pytest

from p2paudit.attest.audits import attestation_from_audit, describe_hardware
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record import decode_signed, sign_attestation
from p2paudit.audit.records import StepAudit

from attest_helpers import RUN, digest, key

ALICE = key(1)


def _audit(verdict, observed):
    return StepAudit(run_id=RUN, step=3, input_digest=digest("s3"), data_digest=digest("d3"),
                     claimed_digest=digest("s4"), observed_digest=observed, verdict=verdict, backend="cpu",
                     seconds=0.5, engine_version="1", arithmetic_version=1)


@pytest.mark.parametrize("verdict,observed", [("match", "s4"), ("mismatch", "other"), ("error", "other"),
                                              ("error", None)])
def test_audit_to_signed_attestation(verdict, observed):
    audit = _audit(verdict, digest(observed) if observed else None)
    record = attestation_from_audit(audit, ALICE.public_key, 1234, "x86_64, caf\u00e9 CPU\n")
    assert record.verdict == verdict and record.step == 3 and record.claimed_output_digest == digest("s4")
    assert record.observed_output_digest == (None if verdict == "error" else digest(observed))
    assert record.hardware == "x86_64, caf? CPU"
    assert decode_signed(sign_attestation(ALICE, record).encoded).attestation == record


def test_an_inconsistent_audit_is_refused():
    with pytest.raises(AttestationError, match="says match but observed digest differs"):
        attestation_from_audit(_audit("match", digest("other")), ALICE.public_key, 1, "")
    with pytest.raises(AttestationError, match="has no observed digest"):
        attestation_from_audit(_audit("mismatch", None), ALICE.public_key, 1, "")
    with pytest.raises(AttestationError, match="verdict 'maybe'"):
        attestation_from_audit(dataclasses.replace(_audit("match", digest("s4")), verdict="maybe"),
                               ALICE.public_key, 1, "")


def test_describe_hardware_is_printable_and_bounded():
    text = describe_hardware("NVIDIA H200")
    assert 0 < len(text) <= 256 and text.isascii() and text.isprintable()
    assert text.endswith("NVIDIA H200")
