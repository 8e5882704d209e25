"""Sync pages proved against a checkpoint: every mutation refused, 10,000 attestations synced, resume from the cursor."""

import time

import pytest
from node_helpers import key, open_store, signed

from ledger import Checkpoint, Ledger, leaf_hash, root_from_leaf_hashes
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.verification import verify_store
from p2paudit.node import wire
from p2paudit.node.protocols.sync import (
    PageProofError,
    SyncCursor,
    SyncSession,
    apply_page,
    page_for,
    range_proof_ranges,
    serve_sync,
    verify_page,
)
from p2paudit.node.wire import Page, RangeProof, WireError

ORIGIN = "example.com/sync-test"


def _ledger(tmp_path, n, name="a"):
    ledger = Ledger.open(tmp_path / f"{name}.db", ORIGIN)
    ledger.append_many([b"entry %d %s" % (i, name.encode()) for i in range(n)])
    return ledger


def _checkpoint(ledger, size=None):
    size = ledger.size if size is None else size
    return Checkpoint(ORIGIN, size, ledger.root(size))


def test_every_range_of_small_trees_verifies(tmp_path):
    ledger = _ledger(tmp_path, 21)
    hashes = [leaf_hash(e) for e in ledger.entries()]
    for size in range(1, 22):
        cp = _checkpoint(ledger, size)
        assert cp.root == root_from_leaf_hashes(hashes[:size])
        for start in range(size):
            for count in range(1, size - start + 1):
                page = page_for(ledger, start, count, size)
                assert verify_page(cp, start, page.entries, page.proof) == list(page.entries)
                left, right = range_proof_ranges(start, start + count, size)
                assert len(left) + len(right) <= 2 * size.bit_length()


def test_proof_stays_logarithmic(tmp_path):
    left, right = range_proof_ranges(123_456, 123_456 + 256, 10_000_001)
    assert len(left) <= 24 and len(right) <= 25


@pytest.fixture
def page_case(tmp_path):
    ledger = _ledger(tmp_path, 1000)
    cp = _checkpoint(ledger, 1000)
    page = page_for(ledger, 300, 100, 1000)
    return ledger, cp, page


def _flip(data: bytes, at: int = 0) -> bytes:
    return data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]


def test_page_mutations_refused(page_case, tmp_path):
    ledger, cp, page = page_case
    entries, proof = list(page.entries), page.proof
    verify_page(cp, 300, entries, proof)
    bad = []
    bad.append((300, [_flip(entries[0])] + entries[1:], proof))
    bad.append((300, entries[:50] + [_flip(entries[50], 3)] + entries[51:], proof))
    bad.append((300, entries, RangeProof((_flip(proof.left[0]),) + proof.left[1:], proof.right)))
    bad.append((300, entries, RangeProof(proof.left, proof.right[:-1] + (_flip(proof.right[-1], 31),))))
    bad.append((299, entries, proof))
    bad.append((301, entries, proof))
    bad.append((300, entries[:-1], proof))  # truncated page
    bad.append((300, entries + [ledger.entry(400)], proof))  # extra entry
    bad.append((300, entries, RangeProof(proof.left[:-1], proof.right)))  # truncated proof
    bad.append((300, entries, RangeProof(proof.left, proof.right + (proof.right[0],))))  # extra hash
    bad.append((300, entries, RangeProof(proof.right, proof.left)))  # swapped sides
    bad.append((300, entries[1:] + entries[:1], proof))  # reordered
    other = _ledger(tmp_path, 1000, "b")
    foreign = page_for(other, 300, 100, 1000)
    bad.append((300, list(foreign.entries), proof))  # entries from another tree
    bad.append((300, list(foreign.entries), foreign.proof))
    bad.append((900, entries, proof))  # runs past the tree
    for start, items, mutated in bad:
        with pytest.raises(PageProofError, match=r"page|proof"):
            verify_page(cp, start, items, mutated)
    with pytest.raises(PageProofError, match="gives root"):
        verify_page(_checkpoint(ledger, 999), 300, entries, proof)


def test_page_error_carries_numbers(page_case):
    _, cp, page = page_case
    flipped = RangeProof(page.proof.left, (_flip(page.proof.right[0]),) + page.proof.right[1:])
    with pytest.raises(
        PageProofError, match=r"page \[300, 400\) gives root [0-9a-f]{16}\.\., the checkpoint of size 1000"
    ):
        verify_page(cp, 300, page.entries, flipped)
    left, right = len(page.proof.left), len(page.proof.right)
    with pytest.raises(PageProofError, match=rf"has {left + 1} left and {right} right hashes, want {left} and {right}"):
        verify_page(cp, 300, page.entries, RangeProof(page.proof.left + (b"\x00" * 32,), page.proof.right))


def test_page_size_limits(tmp_path):
    ledger = _ledger(tmp_path, 600)
    page = page_for(ledger, 0, 10_000, 600)
    assert len(page.entries) == wire.MAX_PAGE
    assert len(page_for(ledger, 590, 100, 600).entries) == 10
    with pytest.raises(Exception, match="not within"):
        page_for(ledger, 600, 1, 600)


def _fill(store, identity, n):
    items = [signed(identity, step, time_ms=step + 1).encoded for step in range(n)]
    for i in range(0, n, 1000):
        store.append_many(items[i : i + 1000])
    return items


def _run_session(session, server, note, limit=None):
    exchanged = 0
    while (request := session.next_request()) is not None:
        if limit is not None and exchanged == limit:
            return False
        session.handle_response(serve_sync(server, request, note))
        exchanged += 1
    return True


@pytest.mark.slow  # 4.4 s (fast tier: pytest -m 'not slow')
@pytest.mark.serial  # under 10 s: run alone (tests/conftest.py)
def test_sync_10000_attestations(tmp_path):
    alice, bob = key(1), key(2)
    source = open_store(tmp_path / "alice.db", alice)
    items = _fill(source, alice, 10_000)
    note = source.checkpoint(alice)
    target = open_store(tmp_path / "bob.db", bob)
    started = time.perf_counter()
    session = SyncSession(target, SyncCursor(target))
    assert _run_session(session, source, note)
    elapsed = time.perf_counter() - started
    print(f"\nsync: 10,000 attestations in {elapsed:.2f} s, {10_000 / elapsed:,.0f} attestations/s (verified, stored)")
    assert elapsed < 10
    assert sum(a.new for a in session.applied) == 10_000
    assert list(target.ledger.entries()) == items
    assert verify_store(target).ok
    assert SyncCursor(target).fetched(source.ledger.origin) == 10_000
    # A second sync with nothing new asks only for the status.
    again = SyncSession(target, SyncCursor(target))
    assert _run_session(again, source, note) and again.applied == []


def test_interrupted_sync_resumes_from_cursor(tmp_path):
    alice, bob = key(1), key(2)
    source = open_store(tmp_path / "alice.db", alice)
    items = _fill(source, alice, 1000)
    note = source.checkpoint(alice)
    target = open_store(tmp_path / "bob.db", bob)
    first = SyncSession(target, SyncCursor(target), page_size=100)
    assert not _run_session(first, source, note, limit=4)  # status + 3 pages, then the "connection" drops
    assert target.ledger.size == 300
    target.close()
    target = open_store(tmp_path / "bob.db", bob)  # a restart
    assert SyncCursor(target).fetched(source.ledger.origin) == 300
    second = SyncSession(target, SyncCursor(target), page_size=100)
    assert _run_session(second, source, note)
    assert len(second.applied) == 7 and sum(a.new for a in second.applied) == 700
    assert list(target.ledger.entries()) == items
    # The peer grew: only the new part is fetched, against its new checkpoint.
    more = [signed(alice, step, time_ms=step + 1).encoded for step in range(1000, 1050)]
    source.append_many(more)
    third = SyncSession(target, SyncCursor(target), page_size=100)
    assert _run_session(third, source, source.checkpoint(alice))
    assert [a.new for a in third.applied] == [50]
    assert list(target.ledger.entries()) == items + more


def test_apply_page_skips_held_and_unknown_runs_but_checks_signatures(tmp_path):
    alice = key(1)
    store = open_store(tmp_path / "s.db", alice)
    held = signed(alice, 1).encoded
    store.append(held)
    unknown = signed(alice, 2, run=b"\x07" * 32).encoded
    beyond = signed(alice, 100_001).encoded
    applied = apply_page(store, [held, signed(alice, 3).encoded, unknown, beyond])
    assert applied.skipped == 2 and applied.new == 1 and store.ledger.size == 2
    forged = unknown[:-1] + bytes([unknown[-1] ^ 1])
    with pytest.raises(AttestationError, match="bad signature"):
        apply_page(store, [signed(alice, 4).encoded, forged])
    with pytest.raises(AttestationError):
        apply_page(store, [signed(alice, 5).encoded, b"\x93\x01"])
    assert store.ledger.size == 2


def test_bad_peer_responses_refused(tmp_path):
    alice, bob, mallory = key(1), key(2), key(3)
    source = open_store(tmp_path / "alice.db", alice)
    _fill(source, alice, 300)
    note = source.checkpoint(alice)
    target = open_store(tmp_path / "bob.db", bob)
    session = SyncSession(target, SyncCursor(target))
    request = session.next_request()
    # A checkpoint signed by a key other than the one its origin names.
    forged = note.replace(source.ledger.origin, "p2paudit.dev/ledger/" + "1" * 10)
    with pytest.raises((PageProofError, WireError)):
        session.handle_response(serve_sync(source, request, forged))
    session = SyncSession(target, SyncCursor(target))
    session.handle_response(serve_sync(source, session.next_request(), note))
    request = session.next_request()
    page = wire.decode_sync_response(serve_sync(source, request, note))
    tampered = Page(page.start, (signed(mallory, 0).encoded,) + page.entries[1:], page.proof)
    with pytest.raises(PageProofError):
        session.handle_response(wire.encode_sync_response(tampered))
    shifted = Page(page.start + 1, page.entries[:-1], page.proof)
    with pytest.raises(PageProofError, match="starts at 1"):
        session.handle_response(wire.encode_sync_response(shifted))
    assert target.ledger.size == 0 and SyncCursor(target).fetched(source.ledger.origin) == 0
    refusal = serve_sync(source, wire.encode_sync_request(wire.RangeRequest(301, 0, 1)), note)
    assert isinstance(wire.decode_sync_response(refusal), wire.SyncRefusal)
