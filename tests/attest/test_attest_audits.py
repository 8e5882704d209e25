"""Attestations built from step audits: every outcome of a replay becomes a signable v2 record."""

from __future__ import annotations

import dataclasses

import pytest
from attest_helpers import RUN, digest, key

from p2paudit.attest.audits import attestation_from_audit, describe_hardware
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record import decode_signed, sign_attestation
from p2paudit.audit.records import StepAudit, loss_bits

ALICE = key(1)


def _audit(verdict, findings=(), subject="step"):
    """An audit of step 3 (or of init) whose observed values differ from the claim exactly in `findings`."""
    init = subject == "init"
    error = verdict == "error"
    claimed_out = digest("s0" if init else "s4")
    seen_out = digest("other") if {"state", "init"} & set(findings) else claimed_out
    return StepAudit(
        run_id=RUN,
        step=0 if init else 3,
        input_digest=None if init else digest("s3"),
        claimed_data=None if init else digest("d3"),
        observed_data=None if init or error else digest("d-other" if "data" in findings else "d3"),
        claimed_digest=claimed_out,
        observed_digest=None if error else seen_out,
        claimed_loss=None if init else 2.25,
        observed_loss=None if init or error else (2.5 if "loss" in findings else 2.25),
        findings=tuple(findings),
        verdict=verdict,
        backend="cpu",
        seconds=0.5,
        engine_version="1",
        arithmetic_version=1,
        subject=subject,
    )


CASES = [
    ("match", (), "step"),
    ("error", (), "step"),
    ("match", (), "init"),
    ("mismatch", ("init",), "init"),
    ("error", (), "init"),
] + [
    ("mismatch", f, "step")
    for f in [
        ("data",),
        ("loss",),
        ("state",),
        ("counter",),
        ("data", "state", "loss"),
        ("counter", "data"),
        ("counter", "state", "loss"),
    ]
]


@pytest.mark.parametrize("verdict,findings,subject", CASES)
def test_audit_to_signed_attestation(verdict, findings, subject):
    audit = _audit(verdict, findings, subject)
    record = attestation_from_audit(audit, ALICE.public_key, 1234, "x86_64, caf\u00e9 CPU\n")
    assert (record.version, record.subject, record.verdict, record.findings) == (2, subject, verdict, findings)
    assert record.claimed_output_digest == audit.claimed_digest
    assert record.observed_output_digest == audit.observed_digest
    assert record.hardware == "x86_64, caf? CPU"
    if subject == "step":
        assert (record.claimed_data_digest, record.observed_data_digest) == (audit.claimed_data, audit.observed_data)
        assert record.claimed_loss_bits == loss_bits(2.25)
        assert record.observed_loss_bits == (None if verdict == "error" else loss_bits(audit.observed_loss))
    assert decode_signed(sign_attestation(ALICE, record).encoded).attestation == record


def test_observed_values_of_an_error_audit_are_dropped():
    # a step replayed from an input that was already wrong observed something, but checks nothing
    audit = dataclasses.replace(
        _audit("error"), observed_digest=digest("x"), observed_data=digest("d3"), observed_loss=1.0
    )
    record = attestation_from_audit(audit, ALICE.public_key, 1, "")
    assert (record.observed_output_digest, record.observed_data_digest, record.observed_loss_bits) == (None,) * 3


def test_an_inconsistent_audit_is_refused():
    with pytest.raises(AttestationError, match="says match but the pairs .'state'. differ"):
        attestation_from_audit(
            dataclasses.replace(_audit("match"), observed_digest=digest("other")), ALICE.public_key, 1, ""
        )
    with pytest.raises(AttestationError, match="has no observed_output_digest"):
        attestation_from_audit(
            dataclasses.replace(_audit("mismatch", ("state",)), observed_digest=None), ALICE.public_key, 1, ""
        )
    with pytest.raises(AttestationError, match="finds .'data'. but the pairs that differ are .'loss'."):
        attestation_from_audit(
            dataclasses.replace(_audit("mismatch", ("loss",)), findings=("data",)), ALICE.public_key, 1, ""
        )
    with pytest.raises(AttestationError, match="verdict 'maybe'"):
        attestation_from_audit(dataclasses.replace(_audit("match"), verdict="maybe"), ALICE.public_key, 1, "")


def test_describe_hardware_is_printable_and_bounded():
    text = describe_hardware("NVIDIA H200")
    assert 0 < len(text) <= 256 and text.isascii() and text.isprintable()
    assert text.endswith("NVIDIA H200")


def test_recording_a_range_signs_every_outcome_init_first(tmp_path):
    # The path `verify-range --attest` takes: a data-only mismatch stopped it with exit 2 before v2.
    from p2paudit.attest.recording import record_audits
    from p2paudit.attest.store import AttestationStore, origin_for

    audits = [
        dataclasses.replace(_audit("match"), step=0),
        _audit("mismatch", ("data",)),
        dataclasses.replace(_audit("mismatch", ("loss",)), step=4),
        _audit("match", (), "init"),
    ]
    with AttestationStore.open(tmp_path / "ledger.db", origin_for(ALICE.public_key)) as store:
        recorded = record_audits(store, ALICE, RUN, 10, "run", audits, hardware="test")
        assert recorded.new == 4 and recorded.conflicts == ()
        stored = [store.attestation(i).attestation for i in recorded.indices]
        assert [(a.subject, a.step, a.findings) for a in stored] == [
            ("init", 0, ()),
            ("step", 0, ()),
            ("step", 3, ("data",)),
            ("step", 4, ("loss",)),
        ]
        again = record_audits(store, ALICE, RUN, 10, "run", audits, hardware="test")
        assert again.new == 0 and again.indices == recorded.indices
