"""A lab manifest is signed under a domain of its own: its signature never verifies as an engine manifest's,
nor an engine manifest's as a lab manifest's, so neither can be relabelled as the other format."""

from __future__ import annotations

import json

import pytest

from p2paudit.errors import InputError
from p2paudit.identity import generate_identity, verify_signature
from p2paudit.run.lab_run import LAB_FORMAT, LAB_SIGNATURE_DOMAIN, read_lab_run
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_DOMAIN, SIGNATURE_FILE, read_manifest, sign_body
from p2paudit.run.manifest_body import canonical_json
from tests.lab.lab_runs import publish_tiny


def test_the_two_domains_differ_and_neither_is_the_others_prefix():
    assert LAB_SIGNATURE_DOMAIN != SIGNATURE_DOMAIN
    assert not LAB_SIGNATURE_DOMAIN.startswith(SIGNATURE_DOMAIN) and not SIGNATURE_DOMAIN.startswith(
        LAB_SIGNATURE_DOMAIN
    )
    assert SIGNATURE_DOMAIN == b"p2paudit run manifest v1\x00"  # the engine's, unchanged (its vectors stand)


def test_a_signed_lab_manifest_relabelled_as_the_other_format_is_refused(tmp_path):
    identity = generate_identity()
    run = publish_tiny(tmp_path, identity, 1)
    body_bytes = (run / MANIFEST_FILE).read_bytes()
    envelope = json.loads((run / SIGNATURE_FILE).read_bytes())
    signature = bytes.fromhex(envelope["signature"])
    assert read_lab_run(run)[2] == identity.public_key  # as published: a lab run
    assert verify_signature(identity.public_key, signature, LAB_SIGNATURE_DOMAIN + body_bytes)
    assert not verify_signature(identity.public_key, signature, SIGNATURE_DOMAIN + body_bytes)

    # The same signed bytes handed to the engine's reader: refused at the signature, before any field (and named
    # a lab run's: its signature verifies under the lab domain only).
    with pytest.raises(InputError, match="is a lab run's"):
        read_manifest(run)

    # Relabelled: the body's format rewritten to the engine's, the signature kept: refused by both readers.
    body = json.loads(body_bytes)
    body["format"] = "p2paudit-run"
    (run / MANIFEST_FILE).write_bytes(canonical_json(body))
    with pytest.raises(InputError):
        read_manifest(run)
    with pytest.raises(InputError):
        read_lab_run(run)


def test_a_lab_body_signed_as_an_engine_manifest_is_refused_as_a_lab_run(tmp_path):
    """The reverse: what an engine manifest's signature covers never passes as a lab manifest's."""
    identity = generate_identity()
    run = publish_tiny(tmp_path, identity, 1)
    body = json.loads((run / MANIFEST_FILE).read_bytes())
    assert body["format"] == LAB_FORMAT
    body_bytes, envelope = sign_body(body, identity)  # the engine's domain
    (run / MANIFEST_FILE).write_bytes(body_bytes)
    (run / SIGNATURE_FILE).write_bytes(canonical_json(envelope))
    with pytest.raises(InputError, match="does not verify as a lab run manifest's"):
        read_lab_run(run)
    resigned, lab_envelope = sign_body(body, identity, LAB_SIGNATURE_DOMAIN)
    (run / SIGNATURE_FILE).write_bytes(canonical_json(lab_envelope))
    assert resigned == body_bytes and read_lab_run(run)[2] == identity.public_key
