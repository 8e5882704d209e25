"""Witnessing peers' checkpoints: trust on first use, consistency proofs, rejection, split-view evidence."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger import EMPTY_ROOT, Ledger
from ledger.errors import CheckpointError, ProofError
from ledger.note import Checkpoint, NoteSigner, sign_checkpoint

PEER = "peer.example/log"


@pytest.fixture
def peer(tmp_path):
    """The peer's own ledger and key: it signs checkpoints we witness."""
    signer = NoteSigner(PEER, Ed25519PrivateKey.generate())
    with Ledger.open(tmp_path / "peer.db", PEER) as lg:
        yield lg, signer


@pytest.fixture
def me(tmp_path):
    with Ledger.open(tmp_path / "me.db", "me.example/log") as lg:
        yield lg


def _grow(lg: Ledger, n: int) -> None:
    start = lg.size
    lg.append_many([b"peer entry %d" % i for i in range(start, start + n)])


def test_first_is_trusted_then_consistent_growth_is_accepted(peer, me):
    plg, signer = peer
    _grow(plg, 5)
    first = plg.checkpoint(signer)
    r = me.add_peer_checkpoint(first, signer.verifier, [])
    assert r.status == "first" and r.checkpoint.size == 5 and not r.split_view
    _grow(plg, 9)
    second = plg.checkpoint(signer)
    r = me.add_peer_checkpoint(second, signer.verifier, plg.consistency_proof(5, 14))
    assert r.status == "consistent" and r.checkpoint.size == 14
    # An older checkpoint arriving late is checked against the newest held, in the other direction.
    older = sign_checkpoint(Checkpoint(PEER, 8, plg.root(8)), signer)
    r = me.add_peer_checkpoint(older, signer.verifier, plg.consistency_proof(8, 14))
    assert r.status == "consistent"
    assert me.add_peer_checkpoint(second, signer.verifier, []).status == "duplicate"
    assert me.split_views() == []
    assert me.verify().ok and me.verify().checkpoints_checked == 3


def test_inconsistent_checkpoint_is_rejected_and_not_stored(peer, me):
    plg, signer = peer
    _grow(plg, 6)
    me.add_peer_checkpoint(plg.checkpoint(signer), signer.verifier, [])
    # A forked history: same first 3 entries, then different ones, signed by the same key.
    forked = [b"peer entry %d" % i for i in range(3)] + [b"fork %d" % i for i in range(7)]
    with Ledger.open(plg.path + ".fork", PEER) as fork:
        fork.append_many(forked)
        note = fork.checkpoint(signer)
        for proof in ([], fork.consistency_proof(6, 10), plg.consistency_proof(3, 6)):
            with pytest.raises(ProofError):
                me.add_peer_checkpoint(note, signer.verifier, proof)
    assert me.conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] == 1


def test_bad_signature_or_wrong_key_is_rejected(peer, me):
    plg, signer = peer
    _grow(plg, 3)
    note = plg.checkpoint(signer)
    other = NoteSigner(PEER, Ed25519PrivateKey.generate())
    with pytest.raises(CheckpointError, match="no signature from a known key"):
        me.add_peer_checkpoint(note, other.verifier, [])
    with pytest.raises(CheckpointError, match="does not verify"):
        me.add_peer_checkpoint(note.replace("\n3\n", "\n4\n"), signer.verifier, [])
    with pytest.raises(CheckpointError):
        me.add_peer_checkpoint("garbage", signer.verifier, [])
    assert me.conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] == 0


def test_split_view_is_kept_as_evidence_and_reported(peer, me):
    plg, signer = peer
    _grow(plg, 4)
    honest = plg.checkpoint(signer)
    me.add_peer_checkpoint(honest, signer.verifier, [])
    evil_root = bytes(32)
    evil = sign_checkpoint(Checkpoint(PEER, 4, evil_root), signer)
    r = me.add_peer_checkpoint(evil, signer.verifier, [])
    assert r.split_view and r.status == "split_view" and r.conflicts == (honest,)
    views = me.split_views()
    assert len(views) == 1
    v = views[0]
    assert (v.origin, v.size, v.vkey) == (PEER, 4, signer.verifier.vkey)
    assert v.roots == (plg.root(4), evil_root) and v.notes == (honest, evil)
    # The honest line is still the one followed: growth is checked against the first root held.
    _grow(plg, 4)
    r = me.add_peer_checkpoint(plg.checkpoint(signer), signer.verifier, plg.consistency_proof(4, 8))
    assert r.status == "consistent"
    # The evidence survives and is signed: verify() checks both notes' signatures.
    assert me.verify().ok and me.verify().checkpoints_checked == 3


def test_keys_are_kept_apart(peer, me):
    plg, signer = peer
    other = NoteSigner("other.example/log", Ed25519PrivateKey.generate())
    _grow(plg, 2)
    me.add_peer_checkpoint(plg.checkpoint(signer), signer.verifier, [])
    note = sign_checkpoint(Checkpoint("other.example/log", 2, bytes(32)), other)
    assert me.add_peer_checkpoint(note, other.verifier, []).status == "first"
    assert me.split_views() == []


def test_a_peer_that_starts_empty_is_followed_without_a_proof_from_the_empty_tree(peer, me):
    # The verifier refuses any proof from size 0 (transparency-dev/merkle); the caller, not the
    # verifier, knows that every tree extends the empty one.
    plg, signer = peer
    empty = plg.checkpoint(signer)
    assert me.add_peer_checkpoint(empty, signer.verifier, []).status == "first"
    _grow(plg, 8)
    grown = plg.checkpoint(signer)
    with pytest.raises(ProofError, match="between sizes 0 and 8 takes no proof .* got 1 hashes"):
        me.add_peer_checkpoint(grown, signer.verifier, [plg.root(8)])
    assert me.add_peer_checkpoint(grown, signer.verifier, []).status == "consistent"
    # The empty tree head arriving after a larger one is consistent with it too.
    other = NoteSigner(PEER, Ed25519PrivateKey.generate())
    assert me.add_peer_checkpoint(plg.checkpoint(other), other.verifier, []).status == "first"
    late_empty = sign_checkpoint(Checkpoint(PEER, 0, EMPTY_ROOT), other)
    assert me.add_peer_checkpoint(late_empty, other.verifier, []).status == "consistent"
    assert me.verify().ok


def test_a_size_zero_checkpoint_must_carry_the_empty_root(peer, me):
    plg, signer = peer
    _grow(plg, 3)
    bogus = sign_checkpoint(Checkpoint(PEER, 0, plg.root(3)), signer)
    with pytest.raises(CheckpointError, match="at size 0 has root .* not the empty tree's"):
        me.add_peer_checkpoint(bogus, signer.verifier, [])
    me.add_peer_checkpoint(plg.checkpoint(signer), signer.verifier, [])
    with pytest.raises(CheckpointError, match="at size 0 has root"):
        me.add_peer_checkpoint(bogus, signer.verifier, [])
    assert me.conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] == 1


@pytest.mark.parametrize("size", [2**63, 2**64 - 1])
def test_a_size_no_ledger_holds_is_a_checkpoint_error_not_an_overflow(me, size):
    """C2SP allows sizes up to 2^64 - 1; SQLite holds integers up to 2^63 - 1: a peer's larger claim is refused
    as its own fault (CheckpointError), before anything is bound, and nothing is stored."""
    signer = NoteSigner(PEER, Ed25519PrivateKey.generate())
    note = sign_checkpoint(Checkpoint(PEER, size, b"\x01" * 32), signer)
    with pytest.raises(CheckpointError, match=r"claims size \d+, beyond the 2\^63 - 1 entries a ledger holds"):
        me.add_peer_checkpoint(note, signer.verifier, [])
    assert me.verify().checkpoints_checked == 0
    held = sign_checkpoint(Checkpoint(PEER, 2**63 - 1, b"\x01" * 32), signer)
    assert me.add_peer_checkpoint(held, signer.verifier, []).status == "first"  # the largest one it holds
