"""Canonical v2 attestation bytes: round trips, every rejection, never a foreign exception."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest
from attest_helpers import RUN, digest, key, make_record, make_signed
from hypothesis import given, settings
from hypothesis import strategies as st

from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record import (
    DOMAIN,
    MAX_SIGNED_SIZE,
    Attestation,
    attestation_to_dict,
    decode_attestation,
    decode_signed,
    encode_attestation,
    sign_attestation,
)
from p2paudit.attest.record_v2 import FIELDS_V2
from p2paudit.audit.records import loss_bits
from p2paudit.errors import InternalError
from p2paudit.identity import sign

ALICE = key(1)
ascii_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=64)
digests = st.binary(min_size=32, max_size=32)
STEP_FINDINGS = ("counter", "data", "state", "loss")


def _other(draw, strategy, value):
    return draw(strategy.filter(lambda other: other != value))


@st.composite
def records(draw):
    """Any valid v2 record: every subject, verdict and finding combination, arbitrary values."""
    subject = draw(st.sampled_from(["step", "init"]))
    verdict = draw(st.sampled_from(["match", "mismatch", "error"]))
    findings: tuple[str, ...] = ()
    if verdict == "mismatch":
        if subject == "init":
            findings = ("init",)
        else:
            chosen = draw(st.sets(st.sampled_from(STEP_FINDINGS), min_size=1))
            findings = tuple(f for f in STEP_FINDINGS if f in chosen)
    losses = st.integers(0, 2**64 - 1)
    claimed_out = draw(digests)
    observed_out = None if verdict == "error" else claimed_out
    if "state" in findings or "init" in findings:
        observed_out = _other(draw, digests, claimed_out)
    step_fields = dict(
        input_digest=None,
        claimed_data_digest=None,
        observed_data_digest=None,
        claimed_loss_bits=None,
        observed_loss_bits=None,
    )
    if subject == "step":
        claimed_data, claimed_loss = draw(digests), draw(losses)
        seen_data = None if verdict == "error" else claimed_data
        seen_loss = None if verdict == "error" else claimed_loss
        if "data" in findings:
            seen_data = _other(draw, digests, claimed_data)
        if "loss" in findings:
            seen_loss = _other(draw, losses, claimed_loss)
        step_fields = dict(
            input_digest=draw(digests),
            claimed_data_digest=claimed_data,
            observed_data_digest=seen_data,
            claimed_loss_bits=claimed_loss,
            observed_loss_bits=seen_loss,
        )
    return Attestation(
        run_id=draw(digests),
        subject=subject,
        step=0 if subject == "init" else draw(st.integers(0, 2**63 - 1)),
        claimed_output_digest=claimed_out,
        observed_output_digest=observed_out,
        findings=findings,
        verdict=verdict,
        engine_version=draw(ascii_text.filter(bool)),
        arithmetic_version=draw(st.integers(0, 2**32 - 1)),
        backend=draw(ascii_text.filter(lambda s: 0 < len(s) <= 32)),
        hardware=draw(ascii_text),
        time_ms=draw(st.integers(0, 2**63 - 1)),
        verifier=ALICE.public_key,
        **step_fields,
    )


@pytest.mark.slow  # 2 s of Hypothesis (fast tier: pytest -m 'not slow')
@given(records())
@settings(max_examples=300, deadline=None)
def test_body_round_trip(record):
    body = encode_attestation(record)
    assert decode_attestation(body) == record
    assert encode_attestation(decode_attestation(body)) == body


@given(records())
@settings(max_examples=150, deadline=None)
def test_signed_round_trip(record):
    signed = sign_attestation(ALICE, record)
    again = decode_signed(signed.encoded)
    assert again == signed and again.attestation.version == 2
    assert decode_signed(memoryview(bytearray(signed.encoded))) == signed
    assert len(signed.encoded) < MAX_SIGNED_SIZE


@given(st.binary(max_size=600))
@settings(max_examples=300, deadline=None)
def test_decode_never_crashes_on_arbitrary_bytes(data):
    for decode in (decode_attestation, decode_signed):
        try:
            decode(data)
        except AttestationError:
            pass


@given(st.data())
@settings(max_examples=150, deadline=None)
def test_every_single_byte_mutation_is_rejected(data):
    signed = make_signed(
        ALICE,
        step=data.draw(st.integers(0, 1000)),
        verdict="mismatch",
        findings=data.draw(st.sampled_from([("data",), ("loss",), ("counter", "state")])),
    )
    blob = bytearray(signed.encoded)
    where = data.draw(st.integers(0, len(blob) - 1))
    blob[where] ^= data.draw(st.integers(1, 255))
    with pytest.raises(AttestationError):
        decode_signed(bytes(blob))


def _envelope(body, signature=None, version=1, domain=DOMAIN):
    signature = sign(ALICE, domain + body) if signature is None else signature
    return msgpack.packb([version, body, signature], use_bin_type=True)


def _body(values):
    return msgpack.packb(values, use_bin_type=True)


def _fields(record):
    return list(msgpack.unpackb(encode_attestation(record)))


def _with(values, **changes):
    """A body with named v2 fields replaced (re-signed, so only the body's own rules can refuse it)."""
    values = list(values)
    for name, value in changes.items():
        values[FIELDS_V2.index(name)] = value
    return _envelope(_body(values))


def test_rejections_name_what_is_wrong():
    good = make_signed(ALICE)
    values = _fields(good.attestation)
    init = _fields(make_record(ALICE, subject="init"))
    cases = {
        "trailing": (good.encoded + b"\x00", "1 trailing bytes"),
        "truncated": (good.encoded[:-1], "not valid msgpack"),
        "oversized": (good.encoded + b"\x00" * MAX_SIGNED_SIZE, "more than the limit 4096"),
        "empty": (b"", "not valid msgpack"),
        "envelope version": (_envelope(good.body, version=2), "envelope version 2 is unknown"),
        "short signature": (_envelope(good.body, signature=good.signature[:63]), "signature has 63 bytes, want 64"),
        "bad signature": (_envelope(good.body, signature=bytes(64)), "bad signature"),
        "other signer": (_envelope(good.body, signature=sign(key(2), DOMAIN + good.body)), "bad signature"),
        "no domain": (_envelope(good.body, signature=sign(ALICE, good.body)), "bad signature"),
        "v1 domain": (_envelope(good.body, domain=b"p2paudit/attestation/v1\x00"), "bad signature"),
        "body version 3": (_with(values, version=3), r"version 3 is unknown, want one of \[1, 2\]"),
        "body version 1": (_with(values, version=1), "19 fields, want 14 .version 1."),
        "bool version": (_with(values, version=True), "version True is unknown"),
        "empty body": (_envelope(_body([])), "version None is unknown"),
        "extra field": (_envelope(_body(values + [0])), "20 fields, want 19"),
        "missing field": (_envelope(_body(values[:-1])), "18 fields, want 19"),
        "str for bytes": (_with(values, run_id="x" * 32), "run_id is str"),
        "short digest": (_with(values, input_digest=b"\x01" * 31), "input_digest has 31 bytes"),
        "bool step": (_with(values, step=True), "step is bool"),
        "negative step": (_with(values, step=-1), "step is -1"),
        "float time": (_with(values, time_ms=1.5), "time_ms is float"),
        "float loss": (_with(values, claimed_loss_bits=2.5, observed_loss_bits=2.5), "claimed_loss_bits is float"),
        "negative loss": (_with(values, claimed_loss_bits=-1, observed_loss_bits=-1), "claimed_loss_bits is -1"),
        "bool loss": (_with(values, claimed_loss_bits=True, observed_loss_bits=True), "claimed_loss_bits is bool"),
        "no claimed loss": (_with(values, claimed_loss_bits=None), "has no claimed loss"),
        "subject": (_with(values, subject="epoch"), "subject 'epoch'"),
        "verdict": (_with(values, verdict="fine"), "verdict 'fine'"),
        "findings as bitmask": (_with(values, findings=8), "findings is a msgpack int"),
        "unknown finding": (_with(values, verdict="mismatch", findings=["vibes"]), "finding 'vibes'"),
        "match but differs": (_with(values, observed_output_digest=digest("x")), "says match but the pairs"),
        "match with findings": (_with(values, findings=["counter"]), "says match"),
        "error with digest": (_with(values, verdict="error"), "verdict error observed"),
        "mismatch, nothing found": (_with(values, verdict="mismatch"), "no findings"),
        "mismatch, wrong part": (_with(values, verdict="mismatch", findings=["data"]), "pairs that differ are"),
        "init with input": (_envelope(_body(init[:4] + [digest("s")] + init[5:])), "init carries input_digest"),
        "init at step 1": (_envelope(_body(init[:3] + [1] + init[4:])), "init has step 1"),
        "control char": (_with(values, backend="a\nb"), "not printable ASCII"),
        "map body": (_envelope(_body({"version": 2})), "not valid msgpack"),
        "not an array": (msgpack.packb(b"x"), "want an array of 3"),
    }
    for name, (blob, message) in cases.items():
        with pytest.raises(AttestationError, match=message):
            decode_signed(blob)
        assert name


def test_non_canonical_encodings_are_rejected():
    good = make_signed(ALICE, step=3, verdict="mismatch", findings=("loss",))
    values = _fields(good.attestation)
    # step 3 written as uint64 instead of a positive fixint
    step_at = 3 + 1 + 34 + 5  # array16 header (19 fields), version, bin8 run id, "step"
    wide = good.body[:step_at] + b"\xcf" + (3).to_bytes(8, "big") + good.body[step_at + 1 :]
    assert msgpack.unpackb(wide) == values
    with pytest.raises(AttestationError, match="not canonically encoded"):
        decode_signed(_envelope(wide))
    # the 19-field array written as array32 instead of array16
    wide_array = b"\xdd" + (19).to_bytes(4, "big") + good.body[3:]
    assert msgpack.unpackb(wide_array) == values
    with pytest.raises(AttestationError, match="not canonically encoded"):
        decode_signed(_envelope(wide_array))
    # the body (322 bytes) as bin32 where bin16 is the canonical length form
    packed = msgpack.packb([1, good.body, good.signature], use_bin_type=True)
    assert packed[2] == 0xC5 and len(good.body) == 322
    wide_env = packed[:2] + b"\xc6" + len(good.body).to_bytes(4, "big") + packed[5:]
    assert msgpack.unpackb(wide_env)[1] == good.body
    with pytest.raises(AttestationError, match="not canonically encoded"):
        decode_signed(wide_env)
    # a finding as bin instead of str
    findings_as_bin = _body(values[:11] + [[b"loss"]] + values[12:])
    with pytest.raises(AttestationError, match="finding b'loss'"):
        decode_signed(_envelope(findings_as_bin))


def test_records_validate_on_construction():
    record = make_record(ALICE)
    with pytest.raises(AttestationError, match="has no observed_data_digest"):
        dataclasses.replace(record, verdict="mismatch", findings=("counter",), observed_data_digest=None)
    with pytest.raises(AttestationError, match="findings is list"):
        dataclasses.replace(record, findings=[])
    with pytest.raises(AttestationError, match="not distinct and in the order"):
        dataclasses.replace(
            make_record(ALICE, verdict="mismatch", findings=("data", "state")), findings=("state", "data")
        )
    with pytest.raises(AttestationError, match="not distinct"):
        dataclasses.replace(record, verdict="mismatch", findings=("counter", "counter"))
    with pytest.raises(AttestationError, match="backend has 33 characters"):
        dataclasses.replace(record, backend="x" * 33)
    with pytest.raises(InternalError, match="signing key"):  # the caller's bug: exit 3
        sign_attestation(key(2), record)


def test_losses_are_compared_as_bits():
    # -0.0 == 0.0 and NaN != NaN as floats; as bits, each value is itself and nothing else.
    record = make_record(ALICE)
    zero = dataclasses.replace(record, claimed_loss_bits=loss_bits(0.0), observed_loss_bits=loss_bits(0.0))
    with pytest.raises(AttestationError, match="says match but the pairs .'loss'. differ"):
        dataclasses.replace(zero, observed_loss_bits=loss_bits(-0.0))
    nan = loss_bits(float("nan"))
    same_nan = dataclasses.replace(record, claimed_loss_bits=nan, observed_loss_bits=nan)
    assert decode_signed(sign_attestation(ALICE, same_nan).encoded).attestation == same_nan
    signed = sign_attestation(
        ALICE, dataclasses.replace(zero, observed_loss_bits=loss_bits(-0.0), verdict="mismatch", findings=("loss",))
    )
    assert decode_signed(signed.encoded).attestation.observed_loss_bits == 1 << 63


def test_result_ignores_time_and_machine():
    a = make_record(ALICE, time_ms=1, backend="cpu")
    b = make_record(ALICE, time_ms=2, backend="triton")
    c = make_record(ALICE, verdict="mismatch")
    d = make_record(ALICE, verdict="mismatch", findings=("loss",))
    init = make_record(ALICE, subject="init")
    assert a.result_digest() == b.result_digest()
    assert len({a.result_digest(), c.result_digest(), d.result_digest(), init.result_digest()}) == 4
    assert (a.index_step, init.index_step) == (0, -1)


def test_json_view():
    view = attestation_to_dict(make_record(ALICE, step=4, verdict="mismatch", findings=("data", "loss")))
    assert view["version"] == 2 and view["run_id"] == RUN.hex() and view["subject"] == "step"
    assert view["findings"] == ["data", "loss"]
    assert view["claimed_loss_bits"] == "4004000000000000" and view["observed_loss_bits"] == "400c000000000000"
    assert view["claimed_data_digest"] != view["observed_data_digest"]
    assert view["claimed_output_digest"] == view["observed_output_digest"]
    error = attestation_to_dict(make_record(ALICE, verdict="error"))
    assert error["observed_output_digest"] is None and error["observed_loss_bits"] is None
    init = attestation_to_dict(make_record(ALICE, subject="init"))
    assert init["input_digest"] is None and init["claimed_loss_bits"] is None


msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.binary(max_size=40)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=20) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=30,
)


@pytest.mark.slow  # 2.6 s of Hypothesis (fast tier: pytest -m 'not slow')
@given(msgpack_values, st.booleans())
@settings(max_examples=200, deadline=None)
def test_decode_never_crashes_on_arbitrary_msgpack(value, as_body):
    packed = msgpack.packb(value, use_bin_type=True)
    blob = msgpack.packb([1, packed, bytes(64)], use_bin_type=True) if as_body else packed
    with pytest.raises(AttestationError):
        decode_signed(blob)


flat_values = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.binary(max_size=40)
    | st.text(max_size=20)
    | st.lists(st.sampled_from(["init", "counter", "data", "state", "loss", 3]), max_size=4)
)


@pytest.mark.slow  # 3.6 s of Hypothesis (fast tier: pytest -m 'not slow')
@given(
    st.dictionaries(st.integers(0, 18), flat_values, min_size=1, max_size=3),
    st.sampled_from(["match", "mismatch", "error"]),
)
@settings(max_examples=300, deadline=None)
def test_decode_never_crashes_on_a_valid_body_with_fields_replaced(replaced, verdict):
    values = _fields(make_record(ALICE, step=5, verdict=verdict))
    for where, value in replaced.items():
        values[where] = value
    try:
        record = decode_attestation(msgpack.packb(values, use_bin_type=True))
    except AttestationError:
        return
    assert encode_attestation(record) == msgpack.packb(values, use_bin_type=True)


# make_signed(key(1), step=7, verdict="mismatch", findings=("data",)): the v2 wire format, frozen byte for
# byte (docs/attestation.md walks through it). A change here is a format change: it needs a version 3.
V2_DATA_MISMATCH_HEX = (
    "9301c50142dc001302c420cc071f76252f8e899e0e67183f43af304e2c77ec6315ccf1280e81d3d744af4ba47374657007c4208a98"
    "28bb1fa1d3b40f13f3af4091f57991e528c63c9992a1ca273775de3eedcec420c7a65f15cbb26fa8aec14d8ce70794ab8add009e11"
    "77832c95869f914c73baf5c4202f49ef9b87f639c6591cfc5860504532bee97aa4ef04827b575a68909635de7bc42010467b72deac"
    "fa1d0824e44b5a028cb45ce5a833778631e6b18e6eb0ba89994fc42010467b72deacfa1d0824e44b5a028cb45ce5a833778631e6b1"
    "8e6eb0ba89994fcf4004000000000000cf400400000000000091a464617461a86d69736d61746368ae703270617564697420302e32"
    "2e3001a3637075ab7838365f36342074657374cf0000018bcfe56800c4200766b36e452ac3fb8acefe50eee9aa6fa19cc8dba1d84b"
    "b67e314e4431647920c4404fff2258add12f06b8fb4d175fc20cba1842d6618ccbfbb48c281d268c53516ee876345e2daf183fbd0e"
    "1997e0b0d07f5f6a549ebefc0c364d60d593777e240b"
)


def test_the_v2_wire_format_is_frozen():
    signed = make_signed(ALICE, step=7, verdict="mismatch", findings=("data",))
    assert signed.encoded.hex() == V2_DATA_MISMATCH_HEX
    assert decode_signed(bytes.fromhex(V2_DATA_MISMATCH_HEX)) == signed
    assert signed.body[:3] == b"\xdc\x00\x13" and signed.body[3] == 2  # array16 of 19, version 2
