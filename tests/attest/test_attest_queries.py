"""Coverage, disputes and equivocations, with their evidence checked from the bytes alone."""

from __future__ import annotations

import pytest
from attest_helpers import RUN, digest, key, make_signed

from ledger import Checkpoint, NoteSigner, NoteVerifier, sign_checkpoint
from p2paudit.attest.queries import (
    check_dispute,
    check_equivocation,
    coverage,
    disputes,
    equivocations,
    load_trusted_keys,
)
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.errors import InputError

A, B, C, D = key(1), key(2), key(3), key(4)
OTHER_RUN = digest("run two")


@pytest.fixture
def store(tmp_path):
    with AttestationStore.open(tmp_path / "ledger.db", origin_for(A.public_key)) as opened:
        opened.register_run(RUN, 8, "one")
        opened.register_run(OTHER_RUN, 4, "two")
        yield opened


def _fill(store):
    items = [
        make_signed(A, step=0),
        make_signed(B, step=0),
        make_signed(C, step=0),
        make_signed(A, step=1),
        make_signed(B, step=1, verdict="mismatch"),  # dispute
        make_signed(A, step=2),
        make_signed(A, step=2, time_ms=9),  # same key, same result twice
        make_signed(C, step=3, verdict="error"),
        make_signed(D, step=3),  # no dispute: an error is no result (the verifier could not check)
        make_signed(D, step=4, verdict="mismatch", observed="x"),
        make_signed(C, step=4, verdict="mismatch", observed="x"),
        make_signed(D, step=5),
        make_signed(D, step=5, verdict="mismatch"),  # D equivocates; one key: no dispute
        make_signed(A, step=0, run=OTHER_RUN),
        make_signed(B, step=0, run=OTHER_RUN, verdict="error"),
        make_signed(C, step=0, run=OTHER_RUN, verdict="mismatch"),  # dispute (match vs mismatch)
    ]
    store.append_many([s.encoded for s in items])
    return items


def test_coverage_all_keys(store):
    _fill(store)
    cov = coverage(store, RUN, min_count=2)
    by_step = {s.step: s for s in cov.per_step}
    assert sorted(by_step) == [0, 1, 2, 3, 4, 5]
    assert (by_step[0].match, by_step[0].checked) == (3, 3)
    assert (by_step[1].match, by_step[1].mismatch, by_step[1].checked) == (1, 1, 2)
    assert (by_step[2].match, by_step[2].checked) == (1, 1)  # distinct keys, not attestations
    assert (by_step[3].error, by_step[3].match, by_step[3].checked) == (1, 1, 1)
    assert (by_step[5].match, by_step[5].mismatch, by_step[5].checked) == (1, 1, 1)
    assert cov.checked_once == 6 and cov.checked_min == 3  # steps 0, 1, 4
    assert cov.with_mismatch == 3 and cov.keys == 4
    assert cov.percent(cov.checked_once) == pytest.approx(75.0)
    assert not cov.trusted_only


def test_coverage_trusted_only(store, tmp_path):
    _fill(store)
    trust = tmp_path / "trusted.txt"
    trust.write_text(f"# our two\n{A.public_key.hex()}  # alice\n\n{D.public_key.hex().upper()}\n")
    trusted = load_trusted_keys(trust)
    assert trusted == {A.public_key, D.public_key}
    cov = coverage(store, RUN, trusted, min_count=1)
    assert cov.trusted_only and cov.keys == 2
    assert [(s.step, s.checked) for s in cov.per_step] == [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1), (5, 1)]
    assert coverage(store, RUN, frozenset()).per_step == ()


def test_trust_file_errors(tmp_path):
    bad = tmp_path / "t.txt"
    bad.write_text("00" * 32 + "\nnot-a-key\n")
    with pytest.raises(InputError, match="line 2"):
        load_trusted_keys(bad)
    with pytest.raises(InputError, match="does not exist"):
        load_trusted_keys(tmp_path / "none")


def test_disputes_with_evidence(store):
    items = _fill(store)
    found = disputes(store)
    assert [(d.run_id, d.step) for d in found] == [(RUN, 1), (OTHER_RUN, 0)]  # not step 3: error beside match
    step1 = found[0]
    assert [[e.verdict for e in side] for side in step1.sides] == [["match"], ["mismatch"]]
    assert step1.sides[0][0].signed == items[3].encoded
    assert check_dispute(step1.sides[0][0].signed, step1.sides[1][0].signed)
    assert [(d.run_id, d.step) for d in disputes(store, OTHER_RUN)] == [(OTHER_RUN, 0)]
    # agreeing keys are not a dispute, and neither is an error beside a result
    assert not check_dispute(items[0].encoded, items[1].encoded)
    assert not check_dispute(items[7].encoded, items[8].encoded)
    assert not check_dispute(items[13].encoded, items[14].encoded)
    assert check_dispute(items[13].encoded, items[15].encoded)
    assert not check_dispute(items[9].encoded, items[10].encoded)


def test_key_equivocations_with_evidence(store):
    items = _fill(store)
    found = equivocations(store)
    assert [(e.run_id, e.step, e.verifier) for e in found.keys] == [(RUN, 5, D.public_key)]
    evidence = found.keys[0].evidence
    assert [e.signed for e in evidence] == [items[11].encoded, items[12].encoded]
    assert check_equivocation(evidence[0].signed, evidence[1].signed)
    assert not check_equivocation(items[5].encoded, items[6].encoded)  # same result re-signed
    assert not check_equivocation(items[3].encoded, items[4].encoded)  # two keys
    assert found.tree_heads == ()


def test_tree_head_split_views_are_reported(store):
    peer = NoteSigner("peer.example/log", B.private_key)
    notes = [sign_checkpoint(Checkpoint("peer.example/log", 5, digest(f"root {n}")), peer) for n in range(2)]
    verifier = NoteVerifier("peer.example/log", B.public_key)
    store.ledger.add_peer_checkpoint(notes[0], verifier, [])
    store.ledger.add_peer_checkpoint(notes[1], verifier, [])
    heads = equivocations(store).tree_heads
    assert len(heads) == 1 and heads[0].size == 5 and set(heads[0].notes) == set(notes)


def test_init_claims_are_queried_apart_from_step_zero(store):
    from p2paudit.attest.report import dispute_dict, equivocations_dict

    items = [
        make_signed(A, step=0),
        make_signed(A, subject="init"),
        make_signed(B, subject="init", verdict="mismatch"),
        make_signed(C, subject="init"),
        make_signed(C, subject="init", verdict="error"),
    ]
    store.append_many([s.encoded for s in items])
    # A's init match and step-0 match are two claims: neither a dispute nor an equivocation
    assert not check_dispute(items[0].encoded, items[2].encoded)
    assert not check_equivocation(items[0].encoded, items[1].encoded)
    assert check_dispute(items[1].encoded, items[2].encoded) and check_equivocation(items[3].encoded, items[4].encoded)
    (found,) = disputes(store)
    view = dispute_dict(found)
    assert (view["subject"], view["step"], len(view["sides"])) == ("init", 0, 3)
    (equivocation,) = equivocations(store).keys
    assert equivocations_dict(equivocations(store))["keys"][0]["subject"] == "init"
    assert equivocation.verifier == C.public_key
    # coverage counts steps only: step 0 checked by A, init is no step
    cov = coverage(store, RUN)
    assert [(s.step, s.checked) for s in cov.per_step] == [(0, 1)] and cov.checked_once == 1
