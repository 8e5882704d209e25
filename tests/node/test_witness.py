"""Witnessing: each refusal distinct, state stored before the reply, cosignatures verify and tampered ones do not."""

import base64

import pytest
from node_helpers import key, open_store, signed

from ledger import Checkpoint, NoteSigner, sign_checkpoint
from ledger.cosignature import (
    CosignatureSigner,
    CosignatureVerifier,
    cosignature_key_id,
    cosigned_message,
    read_cosignatures,
    verify_cosignature,
)
from ledger.errors import CheckpointError
from ledger.note import key_id
from p2paudit.node import wire
from p2paudit.node.protocols.witness import (
    Witness,
    WitnessRefused,
    read_witness_response,
    record_cosignature,
    split_view_evidence,
    witness_checkpoint,
    witness_request,
    witness_signer,
)
from p2paudit.node.wire import WitnessRequest
from p2paudit.node.wire.validate import check_evidence


@pytest.fixture
def nodes(tmp_path):
    """A log node (alice, 10 entries, checkpoint signed) and a witness node (walter)."""
    alice, walter = key(1), key(2)
    log = open_store(tmp_path / "alice.db", alice)
    log.append_many([signed(alice, step).encoded for step in range(10)])
    witness_store = open_store(tmp_path / "walter.db", walter)
    witness = Witness(witness_store.ledger, witness_signer(walter, witness_store.ledger.origin))
    return alice, log, witness


def _ask(witness, log, note, old_size, now=1_700_000_000):
    return wire.decode_witness_response(witness_checkpoint(witness, witness_request(log.ledger, note, old_size), now))


def test_cosign_grow_and_verify(nodes):
    alice, log, witness = nodes
    note = log.checkpoint(alice)
    first = _ask(witness, log, note, 0)
    assert first.code == wire.WITNESS_OK
    cosignature = verify_cosignature(note, first.text, witness.signer.verifier)
    assert (cosignature.timestamp, cosignature.checkpoint.size) == (1_700_000_000, 10)
    log.append_many([signed(alice, step).encoded for step in range(10, 25)])
    note2 = log.checkpoint(alice)
    response = witness_checkpoint(witness, witness_request(log.ledger, note2, 10), 1_700_000_100)
    cosig2 = read_witness_response(note2, response, witness.signer.verifier)
    assert cosig2.checkpoint.size == 25
    record_cosignature(log.ledger, note2, cosig2)
    received = read_cosignatures(log.conn, kind="received")
    assert [(c.size, c.timestamp) for c in received] == [(25, 1_700_000_100)]
    given = read_cosignatures(witness.ledger.conn, kind="given")
    assert [c.size for c in given] == [10, 25]
    # The signed note with the cosignature appended still opens under the log key (others are ignored).
    assert (note2 + cosig2.line).count("\u2014") == 2


def test_each_refusal_is_distinct(nodes, tmp_path):
    alice, log, witness = nodes
    note = log.checkpoint(alice)
    codes = {}
    codes["malformed"] = wire.decode_witness_response(witness_checkpoint(witness, b"\x93\x01")).code
    foreign = NoteSigner("example.com/other", alice.private_key)
    other = sign_checkpoint(Checkpoint("example.com/other", 10, log.ledger.root()), foreign)  # not a followed log
    codes["unknown"] = wire.decode_witness_response(
        witness_checkpoint(witness, wire.encode_witness_request(WitnessRequest(0, (), other)))
    ).code
    mallory = NoteSigner(log.ledger.origin, key(9).private_key)
    forged = log.ledger.checkpoint(mallory)  # the origin's name, another key
    codes["signature"] = _ask(witness, log, forged, 0).code
    codes["too_large"] = wire.decode_witness_response(
        witness_checkpoint(witness, wire.encode_witness_request(WitnessRequest(11, (), note)))
    ).code
    assert _ask(witness, log, note, 0).code == wire.WITNESS_OK
    log.append_many([signed(alice, step).encoded for step in range(10, 20)])
    note2 = log.checkpoint(alice)
    stale = _ask(witness, log, note2, 5)
    codes["mismatch"] = stale.code
    assert stale.size == 10 and "old size 5 is not 10" in stale.text
    proof = log.ledger.consistency_proof(10, 20)
    bent = wire.encode_witness_request(WitnessRequest(10, (proof[0][::-1],) + tuple(proof[1:]), note2))
    codes["proof"] = wire.decode_witness_response(witness_checkpoint(witness, bent)).code
    # Same size, other root: a second history of alice's log, signed by alice.
    fork = open_store(tmp_path / "fork.db", alice)
    fork.append_many([signed(alice, step, time_ms=7).encoded for step in range(10)])
    forked = fork.checkpoint(alice)
    codes["conflict"] = _ask(witness, fork, forked, 10).code
    assert codes == {
        "malformed": wire.WITNESS_MALFORMED,
        "unknown": wire.WITNESS_UNKNOWN_LOG,
        "signature": wire.WITNESS_BAD_SIGNATURE,
        "too_large": wire.WITNESS_OLD_SIZE_TOO_LARGE,
        "mismatch": wire.WITNESS_OLD_SIZE_MISMATCH,
        "proof": wire.WITNESS_BAD_PROOF,
        "conflict": wire.WITNESS_ROOT_CONFLICT,
    }
    assert len(set(codes.values())) == 7
    # Refusals changed nothing: the witness still stands at 10 and accepts the honest growth.
    assert _ask(witness, log, note2, 10).code == wire.WITNESS_OK
    # The split view is kept, and travels as evidence anybody can check.
    views = witness.ledger.split_views()
    assert len(views) == 1 and views[0].size == 10
    (evidence,) = split_view_evidence(witness.ledger)
    assert check_evidence(evidence) == "split_view"


def test_client_retries_after_mismatch(nodes):
    alice, log, witness = nodes
    note = log.checkpoint(alice)
    assert _ask(witness, log, note, 0).code == wire.WITNESS_OK
    log.append(signed(alice, 10).encoded)
    note2 = log.checkpoint(alice)
    with pytest.raises(WitnessRefused) as refused:
        read_witness_response(
            note2, witness_checkpoint(witness, witness_request(log.ledger, note2, 0)), witness.signer.verifier
        )
    assert (refused.value.code, refused.value.size) == (wire.WITNESS_OLD_SIZE_MISMATCH, 10)
    retry = witness_checkpoint(witness, witness_request(log.ledger, note2, refused.value.size))
    assert read_witness_response(note2, retry, witness.signer.verifier).checkpoint.size == 11


def test_same_checkpoint_again_is_cosigned_again(nodes):
    alice, log, witness = nodes
    note = log.checkpoint(alice)
    assert _ask(witness, log, note, 0).code == wire.WITNESS_OK
    assert _ask(witness, log, note, 10, now=1_700_000_500).code == wire.WITNESS_OK
    assert len(witness.ledger.split_views()) == 0


def test_tampered_cosignature_refused(nodes):
    alice, log, witness = nodes
    note = log.checkpoint(alice)
    line = _ask(witness, log, note, 0).text
    verifier = witness.signer.verifier
    name, blob = line[2:-1].split(" ")
    raw = base64.b64decode(blob)
    for at in (0, 5, 11, 12, 75):  # key id, timestamp, signature bytes
        bad = raw[:at] + bytes([raw[at] ^ 1]) + raw[at + 1 :]
        with pytest.raises(CheckpointError):
            verify_cosignature(note, f"\u2014 {name} {base64.b64encode(bad).decode()}\n", verifier)
    with pytest.raises(CheckpointError, match="76"):
        verify_cosignature(note, f"\u2014 {name} {base64.b64encode(raw[:-1]).decode()}\n", verifier)
    other_note = log.checkpoint(NoteSigner(log.ledger.origin, alice.private_key))
    log.append(signed(alice, 11).encoded)
    grown = log.checkpoint(alice)
    assert other_note.split("\n")[:3] == note.split("\n")[:3]
    with pytest.raises(CheckpointError, match="does not verify"):
        verify_cosignature(grown, line, verifier)
    with pytest.raises(CheckpointError, match="is by"):
        verify_cosignature(note, line, CosignatureVerifier("other", verifier.public_key))
    with pytest.raises(CheckpointError, match="key id"):
        verify_cosignature(note, line, CosignatureVerifier(name, key(5).public_key))


def test_cosignature_format():
    signer = CosignatureSigner("witness.example/w1", key(4).private_key)
    body = "example.com/log\n3\n" + base64.b64encode(b"\x01" * 32).decode() + "\n"
    line = signer.cosign(body, 1679315147)
    raw = base64.b64decode(line.split(" ")[2])
    public = signer.verifier.public_key
    assert raw[:4] == cosignature_key_id("witness.example/w1", public) != key_id("witness.example/w1", public)
    assert int.from_bytes(raw[4:12], "big") == 1679315147
    assert cosigned_message(body, 1679315147) == b"cosignature/v1\ntime 1679315147\n" + body.encode()
    assert CosignatureVerifier.from_vkey(signer.verifier.vkey) == signer.verifier
    assert "+" in signer.verifier.vkey and base64.b64decode(signer.verifier.vkey.split("+", 2)[2])[0] == 0x04
    with pytest.raises(CheckpointError):
        signer.cosign(body, -1)
    with pytest.raises(CheckpointError):
        signer.cosign(body, 2**63)
