"""Canonical attestation bytes: round trips, every rejection, never a foreign exception."""

from __future__ import annotations

import dataclasses

import msgpack
import pytest
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
from p2paudit.identity import sign

from attest_helpers import RUN, digest, key, make_record, make_signed

ALICE = key(1)
ascii_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=64)
digests = st.binary(min_size=32, max_size=32)


@st.composite
def records(draw):
    verdict = draw(st.sampled_from(["match", "mismatch", "error"]))
    claimed = draw(digests)
    observed = {"match": claimed, "error": None}.get(verdict)
    if verdict == "mismatch":
        observed = draw(digests.filter(lambda d: d != claimed))
    return Attestation(
        run_id=draw(digests), step=draw(st.integers(0, 2**63 - 1)), input_digest=draw(digests),
        data_digest=draw(digests), claimed_output_digest=claimed, observed_output_digest=observed, verdict=verdict,
        engine_version=draw(ascii_text.filter(bool)), arithmetic_version=draw(st.integers(0, 2**32 - 1)),
        backend=draw(ascii_text.filter(lambda s: 0 < len(s) <= 32)), hardware=draw(ascii_text),
        time_ms=draw(st.integers(0, 2**63 - 1)), verifier=ALICE.public_key)


@given(records())
@settings(max_examples=200, deadline=None)
def test_body_round_trip(record):
    body = encode_attestation(record)
    assert decode_attestation(body) == record
    assert encode_attestation(decode_attestation(body)) == body


@given(records())
@settings(max_examples=100, deadline=None)
def test_signed_round_trip(record):
    signed = sign_attestation(ALICE, record)
    again = decode_signed(signed.encoded)
    assert again == signed
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
    signed = make_signed(ALICE, step=data.draw(st.integers(0, 1000)))
    blob = bytearray(signed.encoded)
    where = data.draw(st.integers(0, len(blob) - 1))
    blob[where] ^= data.draw(st.integers(1, 255))
    with pytest.raises(AttestationError):
        decode_signed(bytes(blob))


def _envelope(body, signature=None, version=1):
    signature = sign(ALICE, DOMAIN + body) if signature is None else signature
    return msgpack.packb([version, body, signature], use_bin_type=True)


def _body(values):
    return msgpack.packb(values, use_bin_type=True)


def _fields(record):
    return list(msgpack.unpackb(encode_attestation(record)))


def test_rejections_name_what_is_wrong():
    good = make_signed(ALICE)
    values = _fields(good.attestation)
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
        "body version": (_envelope(_body([2] + values[1:])), "version 2 is unknown"),
        "extra field": (_envelope(_body(values + [0])), "15 fields, want 14"),
        "missing field": (_envelope(_body(values[:-1])), "13 fields, want 14"),
        "str for bytes": (_envelope(_body(values[:1] + ["x" * 32] + values[2:])), "run_id is str"),
        "short digest": (_envelope(_body(values[:3] + [b"\x01" * 31] + values[4:])), "input_digest has 31 bytes"),
        "bool step": (_envelope(_body(values[:2] + [True] + values[3:])), "step is bool"),
        "negative step": (_envelope(_body(values[:2] + [-1] + values[3:])), "step is -1"),
        "float time": (_envelope(_body(values[:12] + [1.5] + values[13:])), "time_ms is float"),
        "verdict": (_envelope(_body(values[:7] + ["fine"] + values[8:])), "verdict 'fine'"),
        "match but differs": (_envelope(_body(values[:6] + [digest("x")] + values[7:])), "says match"),
        "error with digest": (_envelope(_body(values[:7] + ["error"] + values[8:])), "verdict error carries"),
        "control char": (_envelope(_body(values[:11] + ["a\nb"] + values[12:])), "not printable ASCII"),
        "map body": (_envelope(_body({"version": 1})), "not valid msgpack"),
        "not an array": (msgpack.packb(b"x"), "want an array of 3"),
    }
    for name, (blob, message) in cases.items():
        with pytest.raises(AttestationError, match=message):
            decode_signed(blob)
        assert name


def test_non_canonical_encodings_are_rejected():
    good = make_signed(ALICE)
    values = _fields(good.attestation)
    # step 0 written as uint64 instead of a positive fixint
    step_at = 1 + 1 + 2 + 32  # after the array header, version and bin8 run id
    wide = good.body[:step_at] + b"\xcf" + (0).to_bytes(8, "big") + good.body[step_at + 1:]
    assert msgpack.unpackb(wide) == values
    with pytest.raises(AttestationError, match="not canonically encoded"):
        decode_signed(_envelope(wide))
    # the body as bin16 where bin8 is the canonical length form
    packed = msgpack.packb([1, good.body, good.signature], use_bin_type=True)
    assert packed[2] == 0xC4  # bin8
    wide_env = packed[:2] + b"\xc5" + len(good.body).to_bytes(2, "big") + packed[4:]
    assert msgpack.unpackb(wide_env)[1] == good.body
    with pytest.raises(AttestationError, match="not canonically encoded"):
        decode_signed(wide_env)


def test_records_validate_on_construction():
    record = make_record(ALICE)
    with pytest.raises(AttestationError, match="has no observed digest"):
        dataclasses.replace(record, verdict="mismatch", observed_output_digest=None)
    with pytest.raises(AttestationError, match="equals claimed"):
        dataclasses.replace(record, verdict="mismatch")
    with pytest.raises(AttestationError, match="backend has 33 characters"):
        dataclasses.replace(record, backend="x" * 33)
    with pytest.raises(AttestationError, match="signing key"):
        sign_attestation(key(2), record)


def test_result_ignores_time_and_machine():
    a = make_record(ALICE, time_ms=1, backend="cpu")
    b = make_record(ALICE, time_ms=2, backend="triton")
    c = make_record(ALICE, verdict="mismatch")
    assert a.result_digest() == b.result_digest() != c.result_digest()


def test_json_view():
    view = attestation_to_dict(make_record(ALICE, verdict="error"))
    assert view["run_id"] == RUN.hex()
    assert view["observed_output_digest"] is None
    assert view["claimed_output_digest"].startswith("sha256:")


msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.binary(max_size=40)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=16) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=30)


@given(msgpack_values, st.booleans())
@settings(max_examples=200, deadline=None)
def test_decode_never_crashes_on_arbitrary_msgpack(value, as_body):
    packed = msgpack.packb(value, use_bin_type=True)
    blob = msgpack.packb([1, packed, bytes(64)], use_bin_type=True) if as_body else packed
    with pytest.raises(AttestationError):
        decode_signed(blob)


flat_values = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.binary(max_size=40)
               | st.text(max_size=20) | st.lists(st.integers(-5, 300), max_size=3))


@given(st.dictionaries(st.integers(0, 13), flat_values, min_size=1, max_size=3))
@settings(max_examples=200, deadline=None)
def test_decode_never_crashes_on_a_valid_body_with_fields_replaced(replaced):
    values = _fields(make_record(ALICE, step=5))
    for where, value in replaced.items():
        values[where] = value
    try:
        record = decode_attestation(msgpack.packb(values, use_bin_type=True))
    except AttestationError:
        return
    assert encode_attestation(record) == msgpack.packb(values, use_bin_type=True)
