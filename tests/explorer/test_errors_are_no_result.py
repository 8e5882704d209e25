"""An "error" attestation is no result (the verifier could not check): it neither makes a dispute nor hides a
finding. Before, a step of two matches and one key's error counted as disputed, and one signed error beside a
lone auditor's mismatch turned the run's red sentence amber (and the count of lone findings negative)."""

from __future__ import annotations

import hashlib
import re
import sqlite3

import pytest

from p2paudit.attest import queries
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.attest.views import create_views
from p2paudit.explorer.server import make_server, start_in_thread
from tests.attest.attest_helpers import key
from tests.explorer.conftest import fetch
from tests.explorer.verdict_helpers import signed

RUN = hashlib.sha256(b"errors are no result").digest()
UPHELD_WITH_ERROR, LONE_WITH_ERROR = 1, 5


def _signed(n: int, step: int, verdict: str = "match") -> bytes:
    return signed(n, step, verdict, RUN)


@pytest.fixture(scope="module")
def ledger_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("errors") / "ledger.db"
    with AttestationStore.open(path, origin_for(key(400).public_key)) as store:
        store.register_run(RUN, 10, "errors")
        store.append_many(
            [
                _signed(401, UPHELD_WITH_ERROR),
                _signed(402, UPHELD_WITH_ERROR),
                _signed(403, UPHELD_WITH_ERROR, "error"),
                _signed(401, LONE_WITH_ERROR, "mismatch"),
                _signed(403, LONE_WITH_ERROR, "error"),
            ]
        )
        store.checkpoint(key(400))
    return path


def test_queries_and_views_count_no_dispute_and_one_finding(ledger_path):
    with AttestationStore.open(ledger_path, origin_for(key(400).public_key)) as store:
        assert queries.disputes(store, RUN) == []
        assert [d.step for d in queries.disputes(store, RUN, findings=True)] == [LONE_WITH_ERROR]
        assert queries.finding_count(store, RUN) == 1
    conn = sqlite3.connect(ledger_path)
    create_views(conn, temp=True)
    assert conn.execute("SELECT step FROM disputes").fetchall() == []
    assert conn.execute("SELECT step, disputed FROM findings").fetchall() == [(LONE_WITH_ERROR, 0)]
    conn.close()


def test_the_explorer_keeps_the_finding_red_and_the_upheld_step_green(ledger_path):
    made = make_server("127.0.0.1:0", ledger_path)
    start_in_thread(made)
    try:
        found = fetch(made, "/api/v1/disputes").json()
        assert (found["total"], found["disputed_total"]) == (1, 0)
        run = fetch(made, f"/api/v1/runs/{RUN.hex()}").json()
        assert run["verdict"]["tone"] == "failed", run["verdict"]
        assert not re.search(r"-\d", run["verdict"]["sentence"]), run["verdict"]["sentence"]
        strip = fetch(made, f"/api/v1/runs/{RUN.hex()}/coverage").json()
        assert strip["totals"]["disputed_steps"] == 0 and strip["totals"]["mismatch_steps"] == 1, strip["totals"]
        step = fetch(made, f"/api/v1/runs/{RUN.hex()}/steps/{UPHELD_WITH_ERROR}").json()["verdict"]
        assert step["tone"] == "upheld", step
    finally:
        made.shutdown()
        made.server_close()
