"""The store's own tables beside the ledger's (same SQLite file), and the ledger file's origin.

    attest_runs     run number, run id, number of steps, label (known runs)
    attest_keys     key number, verifier public key
    attest_index    (run, step, key, leaf) -> verdict, observed digest; the
                    primary key is the query order, so the table is its own index.
                    `step` is the record's index_step: the step, or -1 for an
                    attestation of the initial state (subject "init", a v2
                    record), so init and step 0 are two claims, never one
    attest_batches  (first leaf, count) per write: where the index ends, read
                    in O(log n)
    attest_publishers  (run, public key): the keys that signed the run's
                    manifest, as the command or daemon that registered it
                    read them (a run registered from its id alone has none);
                    added to older ledgers at their next write

All are append-only (triggers), like the ledger's: a conflict is
evidence, so nothing is ever updated or deleted.
"""

from __future__ import annotations

import sqlite3

from p2paudit.identity import peer_id_of

DDL = [
    "CREATE TABLE attest_runs (run INTEGER PRIMARY KEY, run_id BLOB NOT NULL UNIQUE CHECK (length(run_id) = 32), "
    "steps INTEGER NOT NULL CHECK (steps >= 1), label TEXT NOT NULL)",
    "CREATE TABLE attest_keys (key INTEGER PRIMARY KEY, public_key BLOB NOT NULL UNIQUE "
    "CHECK (length(public_key) = 32))",
    "CREATE TABLE attest_index (run INTEGER NOT NULL, step INTEGER NOT NULL, key INTEGER NOT NULL, "
    "leaf INTEGER NOT NULL, verdict INTEGER NOT NULL CHECK (verdict IN (0, 1, 2)), observed BLOB, "
    "PRIMARY KEY (run, step, key, leaf)) WITHOUT ROWID",
    "CREATE TABLE attest_batches (first_leaf INTEGER PRIMARY KEY, count INTEGER NOT NULL CHECK (count >= 1))",
]
PUBLISHERS_DDL = [
    "CREATE TABLE attest_publishers (run INTEGER NOT NULL, public_key BLOB NOT NULL "
    "CHECK (length(public_key) = 32), PRIMARY KEY (run, public_key)) WITHOUT ROWID",
]


def _append_only(table: str) -> list[str]:
    return [
        f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: UPDATE refused'); END",
        f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
        f"BEGIN SELECT RAISE(ABORT, '{table} is append-only: DELETE refused'); END",
    ]


for _table in ("attest_runs", "attest_keys", "attest_index", "attest_batches"):
    DDL += _append_only(_table)
PUBLISHERS_DDL += _append_only("attest_publishers")


def origin_for(public_key: bytes) -> str:
    """The checkpoint origin of a node's ledger: names the log by the node's peer id."""
    return f"p2paudit.dev/ledger/{peer_id_of(public_key)}"


def create_tables(conn: sqlite3.Connection) -> None:
    """Create the tables unless they exist, and those a ledger written before them lacks (attest_publishers).
    Precondition: inside a write transaction."""
    if not has_table(conn, "attest_index"):
        for statement in DDL:
            conn.execute(statement)
    if not has_table(conn, "attest_publishers"):
        for statement in PUBLISHERS_DDL:
            conn.execute(statement)


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def indexed_size(conn: sqlite3.Connection) -> int:
    """How many leaves (0..n-1) the index covers."""
    row = conn.execute("SELECT first_leaf + count FROM attest_batches ORDER BY first_leaf DESC LIMIT 1").fetchone()
    return row[0] if row else 0
