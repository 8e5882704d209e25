"""A run's publisher key in the store: recorded when a run is registered from its manifest, added to older
ledgers at their next write (read-only, they answer "none known"), append-only like every table."""

from __future__ import annotations

import sqlite3

import pytest

from p2paudit.attest.errors import AttestationError
from p2paudit.attest.store import AttestationStore, origin_for
from tests.attest.attest_helpers import RUN, key

PUBLISHER, OTHER = key(40).public_key, key(41).public_key


@pytest.fixture
def path(tmp_path):
    return tmp_path / "ledger.db"


def test_a_run_registered_from_its_manifest_keeps_its_publisher(path) -> None:
    with AttestationStore.open(path, origin_for(key(1).public_key)) as store:
        store.register_run(RUN, 8, "run", PUBLISHER)
        store.register_run(RUN, 8, "run", PUBLISHER)  # again: no second row
        assert store.publishers(RUN) == (PUBLISHER,)
        assert store.publishers(b"\x07" * 32) == ()
        with pytest.raises(AttestationError, match="not 32 bytes"):
            store.register_run(RUN, 8, "run", b"short")
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            store.conn.execute("UPDATE attest_publishers SET public_key = ?", (OTHER,))
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            store.conn.execute("DELETE FROM attest_publishers")


def test_a_run_made_known_by_id_alone_gains_its_key_later(path) -> None:
    with AttestationStore.open(path, origin_for(key(1).public_key)) as store:
        store.register_run(RUN, 8, "by id")
        assert store.publishers(RUN) == ()
        store.register_run(RUN, 8, "from the manifest", PUBLISHER)
        store.register_run(RUN, 8, "re-signed", OTHER)  # the same body signed by another key: both are kept
        assert store.publishers(RUN) == tuple(sorted((PUBLISHER, OTHER)))
        with pytest.raises(AttestationError, match="registered with 8 steps"):
            store.register_run(RUN, 9, "", key(42).public_key)
        assert key(42).public_key not in store.publishers(RUN)  # a refused registration records nothing


def test_a_ledger_written_before_publishers_opens_and_gains_the_table_at_its_next_write(path) -> None:
    with AttestationStore.open(path, origin_for(key(1).public_key)) as store:
        store.register_run(RUN, 8, "old")
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE attest_publishers")  # as a ledger written before the table existed
    conn.commit()
    conn.close()
    with AttestationStore.open_readonly(path) as store:
        assert store.publishers(RUN) == () and [r.run_id for r in store.runs()] == [RUN]
    with AttestationStore.open(path) as store:  # a writer: the table is made
        store.register_run(RUN, 8, "old", PUBLISHER)
    with AttestationStore.open_readonly(path) as store:
        assert store.publishers(RUN) == (PUBLISHER,)
