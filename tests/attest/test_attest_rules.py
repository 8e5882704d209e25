"""Every (subject, verdict, findings, differing pairs, observed or not) combination: the valid ones sign
and round-trip, every other one is refused with AttestationError. The oracle below is the rule table of
docs/attestation.md written as sets, independently of record_v2's code."""

from __future__ import annotations

import itertools

import pytest
from attest_helpers import digest, key

from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record import FINDINGS, SUBJECTS, VERDICTS, Attestation, decode_signed, sign_attestation
from p2paudit.audit import records as audit_records
from p2paudit.audit.records import loss_bits

ALICE = key(1)
PAIRS = {"step": ("data", "state", "loss"), "init": ("init",)}


def _subsets(items):
    return [tuple(c) for n in range(len(items) + 1) for c in itertools.combinations(items, n)]


def _valid(subject, verdict, findings, differ, observed):
    found = set(findings)
    if verdict == "error":
        return not observed and not found
    if not observed:
        return False
    if verdict == "match":
        return not differ and not found
    judged = {"counter"} if subject == "step" else set()
    return bool(found) and found <= set(PAIRS[subject]) | judged and found - judged == set(differ)


def _record(subject, verdict, findings, differ, observed):
    init = subject == "init"
    claimed_state, claimed_data, claimed_loss = digest("out"), digest("data"), loss_bits(1.25)

    def seen(name, claimed, other):
        return None if not observed else other if name in differ else claimed

    state = seen("init" if init else "state", claimed_state, digest("other out"))
    return Attestation(
        run_id=digest("run"),
        subject=subject,
        step=0,
        input_digest=None if init else digest("in"),
        claimed_data_digest=None if init else claimed_data,
        observed_data_digest=None if init else seen("data", claimed_data, digest("other data")),
        claimed_output_digest=claimed_state,
        observed_output_digest=state,
        claimed_loss_bits=None if init else claimed_loss,
        observed_loss_bits=None if init else seen("loss", claimed_loss, loss_bits(1.5)),
        findings=findings,
        verdict=verdict,
        engine_version="e",
        arithmetic_version=1,
        backend="cpu",
        hardware="",
        time_ms=0,
        verifier=ALICE.public_key,
    )


CASES = [
    (subject, verdict, findings, differ, observed)
    for subject in SUBJECTS
    for verdict in VERDICTS
    for findings in _subsets(FINDINGS)
    for differ in _subsets(PAIRS[subject])
    for observed in (True, False)
]


def test_the_format_names_what_the_audit_names():
    assert (FINDINGS, SUBJECTS, VERDICTS) == (audit_records.FINDINGS, audit_records.SUBJECTS, audit_records.VERDICTS)


def test_every_combination_is_signed_or_refused():
    signed = refused = 0
    for case in CASES:
        if _valid(*case):
            record = _record(*case)
            assert decode_signed(sign_attestation(ALICE, record).encoded).attestation == record, case
            signed += 1
        else:
            with pytest.raises(AttestationError):
                _record(*case)
            refused += 1
    # step: 1 match, 15 mismatches (one per non-empty subset of counter/data/state/loss), 8 errors (one
    # record, whatever the unobserved pairs would have been); init: 1 match, 1 mismatch, 2 errors.
    assert (signed, refused) == (28, len(CASES) - 28)


@pytest.mark.parametrize("findings", [f for f in _subsets(("counter", "data", "state", "loss")) if f])
def test_each_step_mismatch_is_signable(findings):
    differ = tuple(f for f in findings if f != "counter")
    record = _record("step", "mismatch", findings, differ, True)
    assert decode_signed(sign_attestation(ALICE, record).encoded).attestation.findings == findings
