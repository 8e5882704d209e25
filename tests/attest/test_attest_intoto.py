"""in-toto Statement in a DSSE envelope: PAE per the spec, export/import, every tampering refused."""

from __future__ import annotations

import base64
import json

import pytest
from attest_helpers import key, make_signed
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
from hypothesis import given, settings
from hypothesis import strategies as st
from vectors_v1 import V1_DSSE_EXPORT, V1_SIGNED_HEX

from p2paudit.attest.errors import AttestationError
from p2paudit.attest.intoto import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    PREDICATE_TYPE_V1,
    build_statement,
    export_dsse,
    import_dsse,
    pae,
)
from p2paudit.identity import sign

ALICE, BOB = key(1), key(2)


def test_pae_matches_the_dsse_spec_example():
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )
    assert pae("", b"") == b"DSSEv1 0  0 "


def test_pae_checks_the_spec_signature():
    # protocol.md's test vector: ECDSA P-256/SHA-256 over PAE; it only verifies if PAE is byte-exact.
    x = 46950820868899156662930047687818585632848591499744589407958293238635476079160
    y = 5640078356564379163099075877009565129882514886557779369047442380624545832820
    public = ec.EllipticCurvePublicNumbers(x, y, ec.SECP256R1()).public_key()
    raw = base64.b64decode("A3JqsQGtVsJ2O2xqrI5IcnXip5GToJ3F+FnZ+O88SjtR6rDAajabZKciJTfUiHqJPcIAriEGAHTVeCUjW2JIZA==")
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    public.verify(der, pae("http://example.com/HelloWorld", b"hello world"), ec.ECDSA(hashes.SHA256()))
    with pytest.raises(InvalidSignature):
        public.verify(der, pae("http://example.com/HelloWorld", b"hello world!"), ec.ECDSA(hashes.SHA256()))


RECORDS = [
    dict(verdict="match"),
    dict(verdict="error"),
    dict(verdict="mismatch"),
    dict(verdict="mismatch", findings=("data",)),
    dict(verdict="mismatch", findings=("loss",)),
    dict(verdict="mismatch", findings=("counter", "data", "state", "loss")),
    dict(subject="init"),
    dict(subject="init", verdict="mismatch"),
    dict(subject="init", verdict="error"),
]


def _signed(case):
    return make_signed(ALICE, **({"step": 7} if case.get("subject") != "init" else {}), **case)


@pytest.mark.parametrize("case", RECORDS)
def test_export_import_round_trip(case):
    signed = _signed(case)
    record = signed.attestation
    text = export_dsse(signed, BOB)  # a node can export somebody else's attestation
    envelope = json.loads(text)
    assert envelope["payloadType"] == PAYLOAD_TYPE
    assert envelope["signatures"][0]["keyid"] == BOB.public_key.hex()
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == PREDICATE_TYPE == "https://p2paudit.dev/attestation/v2"
    subject = statement["subject"][0]
    assert subject["name"].endswith("/init" if record.subject == "init" else "/step/7")
    state = record.observed_output_digest or record.claimed_output_digest
    assert subject["digest"]["sha256"] == state.hex()
    predicate = statement["predicate"]
    assert (predicate["subject"], predicate["findings"], predicate["verdict"]) == (
        record.subject,
        list(record.findings),
        record.verdict,
    )
    for side in ("claimed", "observed"):
        bits = getattr(record, f"{side}_loss_bits")
        assert predicate[f"{side}_loss_bits"] == (None if bits is None else f"{bits:016x}")
        data = getattr(record, f"{side}_data_digest")
        assert predicate[f"{side}_data_digest"] == (None if data is None else "sha256:" + data.hex())
    imported = import_dsse(text.encode())
    assert imported.signed == signed
    assert imported.envelope_signers == (BOB.public_key,)


def test_an_envelope_exported_by_the_v1_code_still_imports():
    imported = import_dsse(V1_DSSE_EXPORT.encode())
    assert imported.signed.encoded == bytes.fromhex(V1_SIGNED_HEX["mismatch"])
    assert imported.envelope_signers == (BOB.public_key,)
    statement = build_statement(imported.signed)
    assert statement["predicateType"] == PREDICATE_TYPE_V1 and "subject" not in statement["predicate"]
    # a v1 record re-exported today says exactly what it said then
    assert export_dsse(imported.signed, BOB) == V1_DSSE_EXPORT
    # its statement cannot be relabelled as a v2 one
    relabelled = dict(statement, predicateType=PREDICATE_TYPE)
    with pytest.raises(AttestationError, match="does not match the signed attestation"):
        import_dsse(_reseal(relabelled))


def _reseal(statement, signer=ALICE, urlsafe=False):
    payload = json.dumps(statement).encode()
    sig = sign(signer, pae(PAYLOAD_TYPE, payload))
    enc = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    return json.dumps(
        {
            "payloadType": PAYLOAD_TYPE,
            "payload": enc(payload).decode(),
            "signatures": [{"keyid": signer.public_key.hex(), "sig": enc(sig).decode()}],
        }
    ).encode()


def test_url_safe_base64_is_accepted():
    signed = make_signed(ALICE, step=3)
    assert import_dsse(_reseal(build_statement(signed), urlsafe=True)).signed == signed


def test_tampering_is_refused():
    signed = make_signed(ALICE, step=3)
    good = json.loads(export_dsse(signed, ALICE))
    statement = build_statement(signed)

    def with_(**changes):
        return json.dumps({**good, **changes}).encode()

    lying = json.loads(json.dumps(statement))
    lying["predicate"]["verdict"] = "mismatch"
    moved = json.loads(json.dumps(statement))
    moved["subject"][0]["name"] = moved["subject"][0]["name"].replace("/step/3", "/step/4")
    forged_inner = json.loads(json.dumps(statement))
    inner = bytearray(signed.encoded)
    inner[-1] ^= 1
    forged_inner["predicate"]["signedAttestation"] = base64.b64encode(bytes(inner)).decode()
    other_pred = json.loads(json.dumps(statement))
    other_pred["predicateType"] = "https://example.com/other"
    flipped_sig = base64.b64encode(bytes(64)).decode()
    cases = {
        with_(payload=base64.b64encode(json.dumps(lying).encode()).decode()): "no valid DSSE signature",
        with_(signatures=[{"keyid": ALICE.public_key.hex(), "sig": flipped_sig}]): "no valid DSSE signature",
        with_(signatures=[{"keyid": BOB.public_key.hex(), "sig": good["signatures"][0]["sig"]}]): "no valid DSSE",
        with_(signatures=[{"sig": good["signatures"][0]["sig"]}]): "no keyid",
        with_(signatures=[{"keyid": "abc", "sig": good["signatures"][0]["sig"]}]): "keyid",
        with_(signatures=[]): "no signatures",
        with_(payloadType="application/json"): "payloadType",
        with_(payload="!!!"): "not valid base64",
        _reseal(lying): "does not match the signed attestation",
        _reseal(moved): "does not match the signed attestation",
        _reseal(forged_inner): "bad signature",
        _reseal(other_pred): "predicateType",
        _reseal({"_type": "x"}): "not an in-toto Statement",
        b"[1, 2]": "want an object",
        b"{not json": "not JSON",
        b" " * 70000: "more than the limit",
    }
    for blob, message in cases.items():
        with pytest.raises(AttestationError, match=message):
            import_dsse(blob)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4),
    max_leaves=20,
)


@given(st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))
@settings(max_examples=200, deadline=None)
def test_import_never_crashes_on_arbitrary_input(data):
    with pytest.raises(AttestationError):
        import_dsse(data)


@pytest.mark.slow  # 2.6 s of Hypothesis (fast tier: pytest -m 'not slow')
@given(st.dictionaries(st.sampled_from(["payloadType", "payload", "signatures", "x"]), json_values, max_size=4))
@settings(max_examples=200, deadline=None)
def test_import_never_crashes_on_envelope_shaped_json(fields):
    signed = make_signed(ALICE)
    good = json.loads(export_dsse(signed, ALICE))
    try:
        imported = import_dsse(json.dumps({**good, **fields}).encode())
    except AttestationError:
        return
    # only fields DSSE does not define may change without breaking the envelope
    assert set(fields) <= {"x"} and imported.signed == signed
