"""The ledger's SQLite schema: tables, append-only triggers, magic and version (connections: ledger.database).

Append-only is enforced by the database itself, not only by this package:
triggers refuse UPDATE and DELETE on every table, refuse an insert on an
index that is already used (which also defeats INSERT OR REPLACE, whose
implicit delete skips DELETE triggers unless recursive_triggers is on), and
refuse an entry whose index is not the current size. Our own connections also
turn recursive_triggers on, so a REPLACE would hit the DELETE trigger too.
"""

from __future__ import annotations

import sqlite3

from ledger.database import describe_error
from ledger.errors import CorruptLedgerError, LedgerError

MAGIC = "p2paudit-ledger"
VERSION = 1

_NEXT_INDEX = "(SELECT COALESCE(MAX(idx) + 1, 0) FROM entries)"  # O(log n) on the rowid b-tree


def _no_change_triggers(table: str) -> list[str]:
    return [
        f"CREATE TRIGGER {table}_no_update BEFORE UPDATE ON {table} "
        f"BEGIN SELECT RAISE(ABORT, 'ledger table {table} is append-only: UPDATE refused'); END",
        f"CREATE TRIGGER {table}_no_delete BEFORE DELETE ON {table} "
        f"BEGIN SELECT RAISE(ABORT, 'ledger table {table} is append-only: DELETE refused'); END",
    ]


DDL: list[str] = [
    "CREATE TABLE ledger_schema (magic TEXT NOT NULL, version INTEGER NOT NULL, origin TEXT NOT NULL)",
    # Leaves: the exact entry bytes and their RFC 9162 leaf hash, index = position in the log.
    "CREATE TABLE entries (idx INTEGER PRIMARY KEY, leaf_hash BLOB NOT NULL CHECK (length(leaf_hash) = 32), "
    "data BLOB NOT NULL CHECK (typeof(data) = 'blob'))",
    # Interior hashes of complete subtrees [idx * 2^level, (idx + 1) * 2^level), level >= 1, stored as they complete.
    "CREATE TABLE nodes (level INTEGER NOT NULL CHECK (level >= 1), idx INTEGER NOT NULL CHECK (idx >= 0), "
    "hash BLOB NOT NULL CHECK (length(hash) = 32), PRIMARY KEY (level, idx)) WITHOUT ROWID",
    # Own signed tree heads and peers' ones (witnessed), kept forever as evidence.
    "CREATE TABLE checkpoints (id INTEGER PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('own', 'peer')), "
    "status TEXT NOT NULL, origin TEXT NOT NULL, size INTEGER NOT NULL CHECK (size >= 0), "
    "root BLOB NOT NULL CHECK (length(root) = 32), vkey TEXT NOT NULL, note TEXT NOT NULL, recorded_at TEXT NOT NULL)",
    "CREATE INDEX checkpoints_by_key ON checkpoints (vkey, origin, size)",
    *_no_change_triggers("ledger_schema"),
    "CREATE TRIGGER ledger_schema_once BEFORE INSERT ON ledger_schema WHEN EXISTS (SELECT 1 FROM ledger_schema) "
    "BEGIN SELECT RAISE(ABORT, 'ledger_schema already holds its row'); END",
    *_no_change_triggers("entries"),
    "CREATE TRIGGER entries_no_overwrite BEFORE INSERT ON entries "
    "WHEN EXISTS (SELECT 1 FROM entries WHERE idx = NEW.idx) "
    "BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only: index already used'); END",
    "CREATE TRIGGER entries_in_order BEFORE INSERT ON entries "
    f"WHEN NEW.idx IS NULL OR NEW.idx IS NOT {_NEXT_INDEX} "
    "BEGIN SELECT RAISE(ABORT, 'ledger entries are append-only: index must equal the current size'); END",
    *_no_change_triggers("nodes"),
    "CREATE TRIGGER nodes_no_overwrite BEFORE INSERT ON nodes "
    "WHEN EXISTS (SELECT 1 FROM nodes WHERE level = NEW.level AND idx = NEW.idx) "
    "BEGIN SELECT RAISE(ABORT, 'ledger nodes are append-only: node already stored'); END",
    "CREATE TRIGGER nodes_within_size BEFORE INSERT ON nodes "
    f"WHEN ((NEW.idx + 1) << NEW.level) > {_NEXT_INDEX} "
    "BEGIN SELECT RAISE(ABORT, 'ledger nodes: subtree reaches past the stored entries'); END",
    *_no_change_triggers("checkpoints"),
    "CREATE TRIGGER checkpoints_in_order BEFORE INSERT ON checkpoints "
    "WHEN NEW.id IS NULL OR NEW.id IS NOT (SELECT COALESCE(MAX(id) + 1, 1) FROM checkpoints) "
    "BEGIN SELECT RAISE(ABORT, 'ledger checkpoints are append-only: id must be the next one'); END",
]


def ensure_schema(conn: sqlite3.Connection, origin: str, path: str) -> None:
    """Create the schema in a fresh database, or check magic, version and origin of an existing one."""
    try:
        _create_if_new(conn, origin, path)
    except sqlite3.Error as exc:
        raise describe_error(exc, path, "be opened for writing") from None
    stored_origin = read_schema(conn, path)
    if stored_origin != origin:
        raise LedgerError(f"{path} is the ledger of origin {stored_origin!r}, not {origin!r}")


def _create_if_new(conn: sqlite3.Connection, origin: str, path: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger_schema'").fetchone()
        if not exists:
            others = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
            if others:
                raise LedgerError(
                    f"{path} is a SQLite database of something else (tables {[r[0] for r in others][:5]})"
                )
            for statement in DDL:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO ledger_schema (magic, version, origin) VALUES (?, ?, ?)", (MAGIC, VERSION, origin)
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def read_schema(conn: sqlite3.Connection, path: str) -> str:
    """Check magic and version of an existing ledger without writing anything; return its origin."""
    try:
        exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'ledger_schema'").fetchone()
        rows = conn.execute("SELECT magic, version, origin FROM ledger_schema").fetchall() if exists else None
    except sqlite3.Error as exc:
        raise describe_error(exc, path, "be read") from None
    if rows is None:
        raise LedgerError(f"{path} is not a p2paudit ledger: it has no ledger_schema table")
    return _check_rows(rows, path)


def _check_rows(rows: list[tuple[str, int, str]], path: str) -> str:
    if len(rows) != 1 or rows[0][0] != MAGIC:
        raise CorruptLedgerError(f"{path}: ledger_schema holds {len(rows)} rows, want one with magic {MAGIC}", None)
    _, version, stored_origin = rows[0]
    if version != VERSION:
        raise LedgerError(f"{path}: ledger schema version {version}, this code reads version {VERSION}")
    return stored_origin
