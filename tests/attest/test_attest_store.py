"""The attestation store: validation before storing, dedupe, no double signing, catch-up indexing."""

from __future__ import annotations

import dataclasses
import multiprocessing
import threading

import msgpack
import pytest
from attest_helpers import RUN, digest, key, make_record, make_signed, make_signed_v1

from ledger import Ledger
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record import DOMAIN, MAX_SIGNED_SIZE
from p2paudit.attest.store import AttestationStore, origin_for, read_origin
from p2paudit.attest.verification import verify_store
from p2paudit.identity import sign

ALICE, BOB = key(1), key(2)
ORIGIN = origin_for(ALICE.public_key)


@pytest.fixture
def store(tmp_path):
    with AttestationStore.open(tmp_path / "ledger.db", ORIGIN) as opened:
        opened.register_run(RUN, 10, "test run")
        yield opened


def _count(store):
    return store.ledger.size, store.conn.execute("SELECT COUNT(*) FROM attest_index").fetchone()[0]


def test_append_and_read_back(store):
    first = make_signed(ALICE, step=3)
    assert store.append(first.encoded).index == 0
    outcome = store.append_many([make_signed(BOB, step=3).encoded, make_signed(BOB, step=4).encoded])
    assert [o.index for o in outcome] == [1, 2] and all(o.new for o in outcome)
    assert store.attestation(0) == first
    assert [i for i, _ in store.step_attestations(RUN, 3)] == [0, 1]
    assert store.ledger.entry(0) == first.encoded  # the leaf is the exact signed bytes
    assert _count(store) == (3, 3)


def test_exact_duplicates_are_stored_once(store):
    signed = make_signed(ALICE, step=1)
    assert store.append(signed.encoded).new
    again = store.append(signed.encoded)
    assert (again.index, again.new) == (0, False)
    in_batch = store.append_many([make_signed(BOB).encoded, make_signed(BOB).encoded])
    assert [(o.index, o.new) for o in in_batch] == [(1, True), (1, False)]
    assert _count(store) == (2, 2)
    # the same result signed at another time is a new attestation, not a duplicate
    assert store.append(make_signed(ALICE, step=1, time_ms=5).encoded).new


def _forgeries():
    good = make_signed(ALICE, step=2)
    body = msgpack.unpackb(good.body)
    unknown_run = make_signed(ALICE, run=digest("other run"))
    at = 3 + 1 + 34 + 5  # array16 header (19 fields), version, bin8 run id, "step": then the step, a fixint
    wide_step = good.body[:at] + b"\xcf" + (2).to_bytes(8, "big") + good.body[at + 1 :]
    assert msgpack.unpackb(wide_step) == body
    return {
        "bad signature": (msgpack.packb([1, good.body, bytes(64)]), "bad signature"),
        "truncated": (good.encoded[:-3], "not valid msgpack"),
        "trailing": (good.encoded + b"\x01", "trailing"),
        "oversized": (good.encoded + bytes(MAX_SIGNED_SIZE), "more than the limit"),
        "version": (msgpack.packb([1, msgpack.packb([9] + body[1:]), good.signature]), "version 9 is unknown"),
        "non-canonical": (msgpack.packb([1, wide_step, sign(ALICE, DOMAIN + wide_step)]), "not canonically"),
        "unknown run": (unknown_run.encoded, "unknown run"),
        "step out of range": (make_signed(ALICE, step=10).encoded, "has 10 steps"),
        "not bytes": ("text", "want bytes"),
    }


@pytest.mark.parametrize("case", sorted(_forgeries()))
def test_every_bad_attestation_is_refused_and_nothing_stored(store, case):
    store.append(make_signed(BOB, step=0).encoded)
    blob, message = _forgeries()[case]
    with pytest.raises(AttestationError, match=message):
        store.append(blob)
    # in a batch, the good ones beside it are not stored either
    with pytest.raises(AttestationError, match="item 1 of 2|item 1"):
        store.append_many([make_signed(BOB, step=5).encoded, blob])
    assert _count(store) == (1, 1)


def test_register_run_is_never_changed(store):
    assert store.register_run(RUN, 10, "again").label == "test run"
    with pytest.raises(AttestationError, match="registered with 10 steps, not 11"):
        store.register_run(RUN, 11)
    with pytest.raises(AttestationError, match="want 1 to 4294967296"):
        store.register_run(digest("x"), 0)
    assert [r.steps for r in store.runs()] == [10]


def test_sign_and_append_never_double_signs(store):
    record = make_record(ALICE, step=4)
    first = store.sign_and_append(ALICE, record)
    assert first.new
    same_result_later = dataclasses.replace(record, time_ms=record.time_ms + 1000, backend="triton")
    assert store.sign_and_append(ALICE, same_result_later) == dataclasses.replace(first, new=False)
    with pytest.raises(AttestationError, match="refusing to equivocate"):
        store.sign_and_append(ALICE, make_record(ALICE, step=4, verdict="mismatch"))
    with pytest.raises(AttestationError, match="another verifier"):
        store.sign_and_append(ALICE, make_record(BOB, step=4))
    assert _count(store) == (1, 1)
    # another key may say something else: that is a dispute, not an equivocation
    assert store.sign_and_append(BOB, make_record(BOB, step=4, verdict="mismatch")).new


def _race(path, verdict, barrier, results):
    with AttestationStore.open(path) as own:
        barrier.wait()
        try:
            results.append(own.sign_and_append(ALICE, make_record(ALICE, step=6, verdict=verdict)).index)
        except AttestationError as exc:
            results.append(str(exc))


def test_two_threads_racing_to_sign_different_results(tmp_path, store):
    for _ in range(3):
        results: list = []
        barrier = threading.Barrier(2)
        threads = [
            threading.Thread(target=_race, args=(store.ledger.path, v, barrier, results)) for v in ("match", "mismatch")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(isinstance(r, int) for r in results) == 1, results
        assert any("refusing to equivocate" in str(r) for r in results)
    assert len(store.step_attestations(RUN, 6)) == 1


def _race_process(path, verdict, barrier, queue):
    results: list = []
    _race(path, verdict, barrier, results)
    queue.put(results[0])


@pytest.mark.slow
def test_two_processes_racing_to_sign_different_results(store):
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_race_process, args=(store.ledger.path, v, barrier, queue)) for v in ("match", "error")]
    for p in procs:
        p.start()
    results = [queue.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert sum(isinstance(r, int) for r in results) == 1, results
    assert len(store.step_attestations(RUN, 6)) == 1


def test_entries_appended_behind_the_store_are_indexed(tmp_path, store):
    path = store.ledger.path
    with Ledger.open(path, ORIGIN) as raw:
        raw.append(make_signed(BOB, step=7).encoded)
    assert store.append(make_signed(ALICE, step=7).encoded).index == 1
    assert [i for i, _ in store.step_attestations(RUN, 7)] == [0, 1]
    with Ledger.open(path, ORIGIN) as raw:
        raw.append(b"not an attestation")
    with pytest.raises(AttestationError, match="ledger entry 2 is not a valid attestation"):
        store.append(make_signed(ALICE, step=8).encoded)


def test_origin_checks(tmp_path, store):
    assert read_origin(store.ledger.path) == ORIGIN
    assert AttestationStore.open(store.ledger.path).ledger.origin == ORIGIN
    with pytest.raises(AttestationError, match="not 'other'"):
        AttestationStore.open(store.ledger.path, "other")
    with pytest.raises(AttestationError, match="no ledger at"):
        AttestationStore.open(tmp_path / "missing.db")


def test_index_tables_are_append_only(store):
    store.append(make_signed(ALICE).encoded)
    import sqlite3

    for statement in (
        "UPDATE attest_index SET verdict = 1",
        "DELETE FROM attest_index",
        "DELETE FROM attest_runs",
        "UPDATE attest_keys SET public_key = zeroblob(32)",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            store.conn.execute(statement)


def test_checkpoint_is_signed_by_the_node(store):
    from ledger import NoteVerifier, open_checkpoint

    store.append(make_signed(ALICE).encoded)
    note = store.checkpoint(ALICE)
    cp = open_checkpoint(note, NoteVerifier(ORIGIN, ALICE.public_key))
    assert (cp.origin, cp.size, cp.root) == (ORIGIN, 1, store.ledger.root())


def test_a_refused_batch_after_catch_up_leaves_the_index_consistent(store):
    newcomer = key(9)
    with Ledger.open(store.ledger.path, ORIGIN) as raw:
        raw.append(make_signed(newcomer, step=1).encoded)  # a key the index has never seen
    with pytest.raises(AttestationError, match="unknown run"):
        store.append(make_signed(ALICE, run=digest("other")).encoded)  # catch-up, then refused: rollback
    assert _count(store) == (1, 0)
    store.append(make_signed(BOB, step=1).encoded)
    store.append(make_signed(newcomer, step=2).encoded)
    report = verify_store(store)
    assert report.ok, report.problems
    assert {s.verifier for _, s in store.step_attestations(RUN, 1)} == {newcomer.public_key, BOB.public_key}


def test_append_reports_conflicts(store):
    assert store.append(make_signed(ALICE, step=2).encoded).conflict is None
    assert store.append(make_signed(BOB, step=2).encoded).conflict is None  # agrees
    assert store.append(make_signed(key(3), step=2, verdict="mismatch").encoded).conflict == "dispute"
    assert store.append(make_signed(BOB, step=2, verdict="error").encoded).conflict == "equivocation"
    # inside one batch, later items see earlier ones
    batch = store.append_many(
        [
            make_signed(ALICE, step=3).encoded,
            make_signed(ALICE, step=3, verdict="error").encoded,
            make_signed(BOB, step=3, verdict="error").encoded,
        ]
    )
    assert [o.conflict for o in batch] == [None, "equivocation", "dispute"]
    # the node's own signing reports a dispute with others too
    assert store.sign_and_append(BOB, make_record(BOB, step=4)).conflict is None
    assert store.sign_and_append(ALICE, make_record(ALICE, step=4, verdict="mismatch")).conflict == "dispute"


@pytest.mark.parametrize("findings", [("data",), ("loss",), ("counter",), ("data", "loss"), ("counter", "state")])
def test_a_mismatch_of_the_data_or_loss_alone_is_signed_and_stored(store, findings):
    # Issue 7 item A3: with the output state equal to the claim, v1 could not say "mismatch" at all
    # ("observed digest equals claimed"), so such a dispute never reached any ledger.
    record = make_record(ALICE, step=5, verdict="mismatch", findings=findings)
    assert ("state" in findings) == (record.observed_output_digest != record.claimed_output_digest)
    stored = store.sign_and_append(ALICE, record)
    assert stored.new and store.attestation(stored.index).attestation == record
    # a verifier that saw a match disputes it, and the query layer sees the dispute
    assert store.append(make_signed(BOB, step=5).encoded).conflict == "dispute"
    assert verify_store(store).ok


def test_init_and_step_zero_of_one_key_are_two_claims(store):
    init = store.sign_and_append(ALICE, make_record(ALICE, subject="init"))
    step0 = store.sign_and_append(ALICE, make_record(ALICE, step=0))
    assert init.new and step0.new and step0.conflict is None
    assert store.sign_and_append(ALICE, make_record(ALICE, subject="init", time_ms=5)).new is False
    with pytest.raises(AttestationError, match="refusing to equivocate"):
        store.sign_and_append(ALICE, make_record(ALICE, subject="init", verdict="mismatch"))
    assert store.append(make_signed(BOB, subject="init", verdict="mismatch").encoded).conflict == "dispute"
    assert [i for i, _ in store.step_attestations(RUN, 0)] == [step0.index]
    assert [i for i, _ in store.step_attestations(RUN, -1)] == [init.index, 2]
    assert verify_store(store).ok


def test_v1_leaves_stay_readable_beside_v2(store):
    old = make_signed_v1(ALICE, step=3)
    assert store.append(old.encoded).new
    assert store.append(make_signed(BOB, step=3).encoded).conflict is None  # a v2 match: no dispute
    assert store.append(make_signed_v1(key(3), step=3, verdict="mismatch").encoded).conflict == "dispute"
    assert store.attestation(0) == old and store.attestation(0).attestation.version == 1
    report = verify_store(store)
    assert report.ok and report.attestations_checked == 3
