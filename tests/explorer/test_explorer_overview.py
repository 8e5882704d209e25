"""A run's overview stays ready while the ledger grows: an older size's answer at once, refreshed behind it."""

from __future__ import annotations

import json
import shutil
import threading
import time

from p2paudit.attest.store import AttestationStore
from p2paudit.explorer.api import Explorer
from p2paudit.explorer.cache import ResultCache
from tests.attest.attest_helpers import key
from tests.explorer.explorer_helpers import SMALL, _signed


def coverage(explorer: Explorer) -> dict:
    answer = explorer.answer(f"/runs/{SMALL.hex()}/coverage", {})
    assert answer.status == 200, answer.body
    return json.loads(answer.body)


def test_an_older_answer_at_once_then_the_new_one(built, tmp_path):
    path = tmp_path / "growing.db"
    shutil.copy(built.path, path)
    explorer = Explorer(path)
    first = coverage(explorer)
    assert first["ledger_size"] == 8027 and first["totals"]["checked_steps"] == 10
    with AttestationStore.open(path) as store:  # a daemon appends behind the explorer
        store.append_many([_signed(key(5), SMALL, step) for step in range(10, 15)])
    stale = coverage(explorer)
    assert stale["ledger_size"] == 8027  # the older answer, while the new one is made
    deadline = time.monotonic() + 20
    while (fresh := coverage(explorer))["ledger_size"] == 8027:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert fresh["ledger_size"] == 8032 and fresh["totals"]["checked_steps"] == 15
    summary = json.loads(explorer.answer(f"/runs/{SMALL.hex()}", {}).body)
    assert summary["ledger_size"] == 8032 and summary["totals"] == fresh["totals"]
    zoom = json.loads(explorer.answer(f"/runs/{SMALL.hex()}/coverage", {"from": "0", "to": "20"}).body)
    assert zoom["ledger_size"] == 8032  # any other range: computed at the current size


def test_one_computation_for_many_askers():
    cache, calls = ResultCache(max_entries=2), []

    def compute() -> int:
        calls.append(1)
        time.sleep(0.05)
        return 7

    threads = [threading.Thread(target=cache.get_or_compute, args=("k", compute)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls == [1] and cache.get_or_compute("k", compute) == 7
    for n in range(3):
        cache.get_or_compute(n, lambda n=n: n)
    assert cache.get_or_compute("k", lambda: 8) == 8  # evicted: least recently used first


def test_saved_overviews_serve_the_first_page_of_the_next_start_when_still_true(built, tmp_path):
    path = tmp_path / "saved.db"
    shutil.copy(built.path, path)
    first = Explorer(path)
    made = coverage(first)
    saved = json.loads(json.dumps(first.overviews.to_save()))  # as the CLI writes and reads it back
    assert {s["run_id"] for s in saved["strips"]} == {SMALL.hex()}
    with AttestationStore.open(path) as store:
        store.append_many([_signed(key(5), SMALL, step) for step in range(10, 15)])
    again = Explorer(path)
    assert again.overviews.restore_from(saved) == 1
    assert coverage(again) == made  # at once: the saved size's (8027) counts, true of those entries
    with AttestationStore.open_readonly(path) as store:
        assert Explorer(path).overviews.restore(store, saved) == 1


def test_saved_overviews_of_another_ledger_or_altered_are_ignored(built, tmp_path):
    path = tmp_path / "saved.db"
    shutil.copy(built.path, path)
    explorer = Explorer(path)
    coverage(explorer)
    saved = json.loads(json.dumps(explorer.overviews.to_save()))
    altered = json.loads(json.dumps(saved))
    altered["strips"][0]["root"] = "00" * 32  # made of other entries than this ledger's first 8027
    other_origin = {**saved, "origin": "p2paudit.dev/ledger/someone-else"}
    beyond = json.loads(json.dumps(saved))
    beyond["strips"][0]["ledger_size"] = 10**9
    for bad in (altered, other_origin, beyond, {"format": "x"}, None, [], {**saved, "strips": [{"run_id": 5}]}):
        assert Explorer(path).overviews.restore_from(bad) == 0


def test_the_warm_up_skips_an_overview_taken_back_at_the_current_size(built):
    first = Explorer(built.path)
    first.overviews.warm_in_background().join()
    saved = json.loads(json.dumps(first.overviews.to_save()))
    again = Explorer(built.path)
    assert again.overviews.restore_from(saved) == 2
    again.overviews.warm_in_background().join()
    assert len(again.cache._items) == 0  # nothing recomputed: the ledger has not grown since
    assert coverage(again) == coverage(first)
