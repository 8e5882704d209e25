"""Set reconciliation (issue 13, item 7): each missing attestation is fetched once, agreeing ranges cost a
summary, and a lying peer is caught. Two real stores, the server's answers passed as bytes."""

from __future__ import annotations

import hashlib

import pytest
import trio
from node_helpers import RUN, key, record

from p2paudit.attest.record import sign_attestation
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.node.protocols import reconcile
from p2paudit.node.wire import WireError, pack

STEPS = 500


def _store(path, n: int) -> AttestationStore:
    store = AttestationStore.open(path, origin_for(key(900 + n).public_key))
    store.register_run(RUN, STEPS, "test")
    reconcile.ensure_index(store)
    return store


def _envelopes(keys: range, steps: range) -> list[bytes]:
    return [sign_attestation(key(k), record(key(k), s, time_ms=3)).encoded for k in keys for s in steps]


def _run(client: AttestationStore, server: AttestationStore, tamper=None) -> reconcile.Reconciled:
    async def ask(request: bytes) -> bytes:
        answer = reconcile.serve(server, request)
        return tamper(request, answer) if tamper else answer

    async def call(fn, *args):
        return fn(client, *args)

    return trio.run(reconcile.reconcile_run, ask, call, RUN, STEPS)


@pytest.fixture
def stores(tmp_path):
    a, b = _store(tmp_path / "a.db", 1), _store(tmp_path / "b.db", 2)
    yield a, b
    a.close()
    b.close()


def test_each_missing_attestation_is_fetched_once_and_agreeing_ranges_cost_a_summary(stores):
    a, b = stores
    shared = _envelopes(range(2), range(0, STEPS, 3))
    a.append_many(shared + _envelopes(range(2, 4), range(100, 140)))
    b.append_many(shared + _envelopes(range(4, 5), range(0, 20)))
    before = b.ledger.size
    done = _run(b, a)
    assert done.fetched == done.new == 80  # exactly what b lacked: keys 2 and 3 on steps 100-139
    assert b.ledger.size == before + 80
    again = _run(b, a)  # nothing missing now: summaries, and the hash lists of the buckets where b holds more
    assert again.fetched == 0 and again.requests <= 2 + 3  # steps 0-19 (b's extras) span at most 3 buckets
    assert again.received_bytes < 0.1 * done.received_bytes
    shared_bytes = sum(len(e) for e in _envelopes(range(2, 4), range(100, 140)))
    assert done.received_bytes < 1.5 * shared_bytes  # hashes and summaries cost well under half again


def test_a_late_joiner_gets_everything_from_the_first_peer_and_nothing_twice(stores, tmp_path):
    a, b = stores
    everything = _envelopes(range(3), range(STEPS))
    a.append_many(everything)
    c = _store(tmp_path / "c.db", 3)
    c.append_many(everything[::-1])  # the same set in another order: another log, the same fingerprints
    late = _store(tmp_path / "late.db", 4)
    first = _run(late, a)
    second = _run(late, c)
    late.close()
    c.close()
    assert first.new == len(everything) and second.fetched == 0 and second.requests == 1
    assert second.received_bytes < 100  # in step: one fingerprint of the whole run, not 64 buckets' worth
    distinct = sum(len(e) for e in everything)
    assert first.received_bytes + second.received_bytes < 2 * distinct


def test_answers_that_were_not_asked_for_or_malformed_are_refused(stores):
    a, b = stores
    a.append_many(_envelopes(range(2), range(10)))
    stranger = sign_attestation(key(77), record(key(77), 5, time_ms=9)).encoded

    def extra_entry(request, answer):
        if reconcile.decode_request(request).__class__ is reconcile.Entries:
            return reconcile.encode_answer("entries", [stranger])
        return answer

    with pytest.raises(WireError, match="not asked for"):
        _run(b, a, extra_entry)

    def short_summary(request, answer):
        if reconcile.decode_request(request).__class__ is reconcile.Summary:
            return reconcile.encode_answer("summary", [])
        return answer

    with pytest.raises(WireError, match="buckets"):
        _run(b, a, short_summary)
    with pytest.raises(WireError):
        _run(b, a, lambda request, answer: answer + b"\x00")  # trailing bytes
    with pytest.raises(WireError):
        reconcile.decode_request(pack(["p2paudit/reconcile", 1, "summary", RUN, 9, 3, 4]))  # backwards
    with pytest.raises(WireError):
        reconcile.decode_request(pack(["p2paudit/reconcile", 1, "summary", RUN, 0, 3, 65]))  # too many buckets


def test_a_flooded_step_is_listed_in_part_never_whole(stores):
    a, b = stores
    a.append_many(_envelopes(range(reconcile.MAX_HASHES + 1), range(7, 8)))
    done = _run(b, a)
    assert done.skipped_ranges == 1 and done.fetched == 0  # refused with a reason, skipped: no blame


def test_init_attestations_are_reconciled_too(stores):
    from dataclasses import replace

    a, b = stores
    fields = dict(subject="init", input_digest=None, claimed_data_digest=None, observed_data_digest=None)
    fields.update(claimed_loss_bits=None, observed_loss_bits=None)
    init = sign_attestation(key(5), replace(record(key(5), 0, time_ms=4), **fields)).encoded
    a.append_many([init])
    assert _run(b, a).new == 1


def test_the_whole_run_fingerprint_follows_appends_without_reading_the_index_again(stores):
    from node_helpers import OTHER_RUN

    a, _ = stores
    a.register_run(OTHER_RUN, STEPS, "other")

    def scanned() -> tuple[int, bytes]:  # what `fingerprints` defines, from the index
        leaves = sorted(leaf for _, leaf in reconcile._leaf_hashes(a, RUN, reconcile.INIT_STEP, STEPS - 1))
        return len(leaves), hashlib.sha256(b"".join(leaves)).digest()

    def whole() -> tuple[int, bytes]:
        (fingerprint,) = reconcile.fingerprints(a, RUN, reconcile.INIT_STEP, STEPS - 1, 1)
        return fingerprint

    a.append_many(_envelopes(range(2), range(0, 300)))
    assert whole() == scanned()
    other = [sign_attestation(key(8), record(key(8), 3, run=OTHER_RUN, time_ms=5)).encoded]
    a.append_many(_envelopes(range(2, 3), range(100, 110)) + other)
    statements: list[str] = []
    a.conn.set_trace_callback(statements.append)
    try:
        after = whole()
    finally:
        a.conn.set_trace_callback(None)
    assert after == scanned() and after[0] == 610
    assert not any("attest_index" in s for s in statements), statements  # 11 new entries read, not 610
