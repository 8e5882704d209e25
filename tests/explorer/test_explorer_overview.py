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
