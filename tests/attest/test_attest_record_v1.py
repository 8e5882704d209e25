"""Version-1 records stay readable and verifiable byte for byte; they are never signed anew."""

from __future__ import annotations

import msgpack
import pytest
from attest_helpers import RUN, digest, key, make_signed, make_v1
from vectors_v1 import V1_SIGNED_HEX

from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record import DOMAIN, attestation_to_dict, decode_attestation, decode_signed, sign_attestation
from p2paudit.attest.record_v1 import DOMAIN_V1, AttestationV1, encode_v1
from p2paudit.errors import InternalError
from p2paudit.identity import sign

ALICE = key(1)


@pytest.mark.parametrize("verdict", ["match", "mismatch", "error"])
def test_committed_v1_bytes_decode_and_verify(verdict):
    data = bytes.fromhex(V1_SIGNED_HEX[verdict])
    signed = decode_signed(data)
    record = signed.attestation
    assert type(record) is AttestationV1 and record.version == 1 and record.subject == "step"
    assert record == make_v1(ALICE, step=7, verdict=verdict)
    assert (record.run_id, record.step, record.index_step, record.verdict) == (RUN, 7, 7, verdict)
    assert signed.encoded == data and encode_v1(record) == signed.body
    # what v1 results always were: (input, data, claimed, verdict, observed)
    assert record.result() == (
        digest("state 7"),
        digest("data 7"),
        digest("state 8"),
        verdict,
        record.observed_output_digest,
    )
    view = attestation_to_dict(record)
    assert view["version"] == 1 and view["data_digest"] == "sha256:" + digest("data 7").hex()


@pytest.mark.parametrize("verdict", ["match", "mismatch", "error"])
def test_every_bit_flip_of_a_v1_vector_is_refused(verdict):
    data = bytes.fromhex(V1_SIGNED_HEX[verdict])
    for where in range(len(data)):
        for bit in (0x01, 0x80):
            blob = bytearray(data)
            blob[where] ^= bit
            with pytest.raises(AttestationError):
                decode_signed(bytes(blob))


def test_v1_truncated_trailing_and_cross_domain_are_refused():
    data = bytes.fromhex(V1_SIGNED_HEX["match"])
    signed = decode_signed(data)
    with pytest.raises(AttestationError, match="not valid msgpack"):
        decode_signed(data[:-1])
    with pytest.raises(AttestationError, match="1 trailing bytes"):
        decode_signed(data + b"\x00")
    # a v1 body signed under the v2 domain (or none) is not a v1 attestation
    for domain in (DOMAIN, b""):
        forged = msgpack.packb([1, signed.body, sign(ALICE, domain + signed.body)], use_bin_type=True)
        with pytest.raises(AttestationError, match="bad signature on version-1"):
            decode_signed(forged)
    # and a v2 body under the v1 domain is not a v2 one
    body = make_signed(ALICE).body
    with pytest.raises(AttestationError, match="bad signature on version-2"):
        decode_signed(msgpack.packb([1, body, sign(ALICE, DOMAIN_V1 + body)], use_bin_type=True))


def test_v1_rules_and_canonical_form_still_hold():
    values = msgpack.unpackb(bytes.fromhex(V1_SIGNED_HEX["match"]))[1]
    fields = msgpack.unpackb(values)
    with pytest.raises(AttestationError, match="says match but observed digest differs"):
        decode_attestation(msgpack.packb(fields[:6] + [digest("x")] + fields[7:], use_bin_type=True))
    with pytest.raises(AttestationError, match="15 fields, want 14 .version 1."):
        decode_attestation(msgpack.packb(fields + [0], use_bin_type=True))
    wide = values[: 1 + 1 + 34] + b"\xcf" + (7).to_bytes(8, "big") + values[1 + 1 + 34 + 1 :]
    assert msgpack.unpackb(wide) == fields
    with pytest.raises(AttestationError, match="not canonically encoded"):
        decode_attestation(wide)


def test_v1_records_are_never_signed_anew():
    with pytest.raises(InternalError, match="only version 2 records are signed, not AttestationV1"):
        sign_attestation(ALICE, make_v1(ALICE))
    with pytest.raises(AttestationError, match="version 2 is not 1"):
        AttestationV1(**{**make_v1(ALICE).__dict__, "version": 2})
