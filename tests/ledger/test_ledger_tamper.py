"""Append-only triggers against plain sqlite3, and tampering behind the ledger's back found by verify()."""

from __future__ import annotations

import sqlite3

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger import Ledger, merkle
from ledger.errors import CorruptLedgerError
from ledger.note import NoteSigner

ORIGIN = "example.org/tamper"
N = 37  # odd, and not a power of two: a ragged right edge


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "l.db"
    with Ledger.open(p, ORIGIN) as lg:
        lg.append_many([b"entry %d" % i for i in range(N)])
        lg.checkpoint(NoteSigner(ORIGIN, Ed25519PrivateKey.generate()))
    return p


def _plain(path, recursive: bool = False) -> sqlite3.Connection:
    """A plain sqlite3 connection, as any other tool would open it (recursive_triggers off by default)."""
    conn = sqlite3.connect(path, isolation_level=None)
    if recursive:
        conn.execute("PRAGMA recursive_triggers=ON")
    return conn


def _snapshot(path):
    conn = _plain(path)
    rows = [
        conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2").fetchall()
        for t in ("entries", "nodes", "checkpoints", "ledger_schema")
    ]
    conn.close()
    return rows


ATTACKS = [
    ("UPDATE entries SET data = x'00' WHERE idx = 3", "UPDATE refused"),
    ("UPDATE entries SET idx = 99 WHERE idx = 36", "UPDATE refused"),
    ("DELETE FROM entries WHERE idx = 36", "DELETE refused"),
    ("DELETE FROM entries", "DELETE refused"),
    (
        "INSERT OR REPLACE INTO entries (idx, leaf_hash, data) VALUES (3, zeroblob(32), x'01')",
        "index already used|index must equal",
    ),
    (
        "REPLACE INTO entries (idx, leaf_hash, data) VALUES (0, zeroblob(32), x'01')",
        "index already used|index must equal",
    ),
    (
        "INSERT OR IGNORE INTO entries (idx, leaf_hash, data) VALUES (5, zeroblob(32), x'01')",
        "index already used|index must equal",
    ),
    (
        "INSERT INTO entries (idx, leaf_hash, data) VALUES (38, zeroblob(32), x'01')",
        "index must equal the current size",
    ),
    (
        "INSERT INTO entries (idx, leaf_hash, data) VALUES (-1, zeroblob(32), x'01')",
        "index must equal the current size",
    ),
    ("INSERT INTO entries (leaf_hash, data) VALUES (zeroblob(32), x'01')", "index must equal the current size"),
    ("INSERT INTO entries (idx, leaf_hash, data) VALUES (37, zeroblob(31), x'01')", "CHECK constraint failed"),
    ("UPDATE nodes SET hash = zeroblob(32)", "UPDATE refused"),
    ("DELETE FROM nodes WHERE level = 1", "DELETE refused"),
    ("INSERT OR REPLACE INTO nodes VALUES (1, 0, zeroblob(32))", "node already stored"),
    ("INSERT INTO nodes VALUES (1, 18, zeroblob(32))", "subtree reaches past the stored entries"),
    ("UPDATE checkpoints SET root = zeroblob(32)", "UPDATE refused"),
    ("DELETE FROM checkpoints", "DELETE refused"),
    ("INSERT OR REPLACE INTO checkpoints SELECT * FROM checkpoints", "id must be the next one"),
    ("UPDATE ledger_schema SET origin = 'evil'", "UPDATE refused"),
    ("DELETE FROM ledger_schema", "DELETE refused"),
    ("INSERT INTO ledger_schema VALUES ('p2paudit-ledger', 1, 'evil')", "already holds its row"),
]


@pytest.mark.parametrize("recursive", [False, True], ids=["plain", "recursive_triggers"])
@pytest.mark.parametrize("statement,message", ATTACKS, ids=[a[0][:48] for a in ATTACKS])
def test_plain_sqlite_cannot_change_the_ledger(path, statement, message, recursive):
    before = _snapshot(path)
    conn = _plain(path, recursive)
    with pytest.raises(sqlite3.IntegrityError, match=message):
        conn.execute(statement)
    conn.close()
    assert _snapshot(path) == before
    with Ledger.open(path, ORIGIN) as lg:
        assert lg.verify().ok


def _drop(path, *triggers):
    conn = _plain(path)
    for t in triggers:
        conn.execute(f"DROP TRIGGER {t}")
    conn.close()


REPLACE_3 = "INSERT OR REPLACE INTO entries (idx, leaf_hash, data) VALUES (3, zeroblob(32), x'01')"


@pytest.mark.parametrize("recursive", [False, True], ids=["plain", "recursive_triggers"])
def test_the_overwrite_trigger_alone_stops_insert_or_replace(path, recursive):
    _drop(path, "entries_in_order")
    conn = _plain(path, recursive)
    with pytest.raises(sqlite3.IntegrityError, match="index already used"):
        conn.execute(REPLACE_3)
    assert conn.execute("SELECT data FROM entries WHERE idx = 3").fetchone()[0] == b"entry 3"


def test_with_recursive_triggers_the_delete_trigger_alone_stops_insert_or_replace(path):
    _drop(path, "entries_in_order", "entries_no_overwrite")
    conn = _plain(path, recursive=True)
    with pytest.raises(sqlite3.IntegrityError, match="DELETE refused"):
        conn.execute(REPLACE_3)
    assert conn.execute("SELECT data FROM entries WHERE idx = 3").fetchone()[0] == b"entry 3"


def test_baseline_without_recursive_triggers_replace_slips_past_the_delete_trigger(path):
    # Why the overwrite trigger exists: REPLACE's implicit delete skips DELETE triggers by default.
    _drop(path, "entries_in_order", "entries_no_overwrite")
    conn = _plain(path, recursive=False)
    conn.execute(REPLACE_3)
    assert conn.execute("SELECT data FROM entries WHERE idx = 3").fetchone()[0] == b"\x01"
    conn.close()
    with Ledger.open(path, ORIGIN) as lg:
        report = lg.verify()
    assert not report.ok and report.first_bad_index == 3


def test_the_ledger_connection_turns_recursive_triggers_on(path):
    with Ledger.open(path, ORIGIN) as lg:
        assert lg.conn.execute("PRAGMA recursive_triggers").fetchone()[0] == 1
        assert lg.conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert lg.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_correct_raw_append_at_the_current_size_is_still_possible(path):
    # The triggers guard order and immutability, not authorship: the next index goes in.
    conn = _plain(path)
    conn.execute("INSERT INTO entries VALUES (?, ?, ?)", (N, merkle.leaf_hash(b"raw"), b"raw"))
    conn.close()
    with Ledger.open(path, ORIGIN) as lg:
        assert lg.size == N + 1 and lg.entry(N) == b"raw"


def _drop_all_triggers(conn: sqlite3.Connection) -> None:
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f'DROP TRIGGER "{name}"')


def _tamper(path, *statements):
    conn = _plain(path)
    _drop_all_triggers(conn)  # what an attacker with write access to the file does first
    for s in statements:
        conn.execute(*s) if isinstance(s, tuple) else conn.execute(s)
    conn.close()
    with Ledger.open(path, ORIGIN) as lg:
        return lg.verify()


@pytest.mark.parametrize("index", [0, 1, 16, 35, 36])
def test_modified_entry_bytes_are_found(path, index):
    report = _tamper(path, ("UPDATE entries SET data = ? WHERE idx = ?", (b"forged", index)))
    assert not report.ok and report.first_bad_index == index
    assert f"entry {index}" in report.problems[0]
    with pytest.raises(CorruptLedgerError) as info:
        report.raise_for_problems()
    assert info.value.index == index and info.value.exit_code == 2


@pytest.mark.parametrize("index", [0, 5, 20, 36])
def test_modified_entry_with_a_matching_leaf_hash_is_found(path, index):
    forged = b"forged"
    report = _tamper(
        path, ("UPDATE entries SET data = ?, leaf_hash = ? WHERE idx = ?", (forged, merkle.leaf_hash(forged), index))
    )
    assert not report.ok
    if index == N - 1:
        # The last leaf is in no stored interior hash yet: only the signed checkpoint catches it.
        assert report.first_bad_index is None and "checkpoint" in report.problems[0]
    else:
        # The lowest stored interior hash over the entry no longer fits; it covers this entry and its sibling.
        assert report.first_bad_index == index - index % 2, report.problems


@pytest.mark.parametrize("index", [0, 7, 20])
def test_deleted_entry_is_found(path, index):
    report = _tamper(path, ("DELETE FROM entries WHERE idx = ?", (index,)))
    assert not report.ok and report.first_bad_index == index
    assert f"entry {index} is missing" in report.problems[0]


def test_deleted_tail_is_found(path):
    report = _tamper(path, ("DELETE FROM entries WHERE idx >= 30",))
    assert not report.ok and report.first_bad_index == 30, report.problems


def test_deleted_last_entry_is_found_through_the_checkpoint(path):
    report = _tamper(path, ("DELETE FROM entries WHERE idx = ?", (N - 1,)))
    assert not report.ok and report.first_bad_index == N - 1, report.problems


def test_modified_interior_hash_is_found(path):
    report = _tamper(path, ("UPDATE nodes SET hash = zeroblob(32) WHERE level = 2 AND idx = 3",))
    assert not report.ok and report.first_bad_index == 12 and "[12, 16)" in report.problems[0]


def test_deleted_interior_hash_is_found(path):
    report = _tamper(path, ("DELETE FROM nodes WHERE level = 3 AND idx = 1",))
    assert not report.ok and report.first_bad_index == 8 and "[8, 16) is missing" in report.problems[0]


def test_altered_checkpoint_is_found(path):
    report = _tamper(
        path, ("UPDATE checkpoints SET note = replace(note, 'example.org/tamper\n37', 'example.org/tamper\n36')",)
    )
    assert not report.ok and "checkpoint 1" in report.problems[0]


def test_consistently_rewritten_history_is_caught_by_the_signed_checkpoint(tmp_path):
    # An attacker rebuilds a whole new ledger file with one entry changed: every hash fits, the signature does not.
    good, forged = tmp_path / "good.db", tmp_path / "forged.db"
    signer = NoteSigner(ORIGIN, Ed25519PrivateKey.generate())
    with Ledger.open(good, ORIGIN) as lg:
        lg.append_many([b"e%d" % i for i in range(10)])
        lg.checkpoint(signer)
    with Ledger.open(forged, ORIGIN) as lg:
        lg.append_many([b"e%d" % i if i != 4 else b"evil" for i in range(10)])
    src, dst = _plain(good), _plain(forged)
    _drop_all_triggers(dst)
    for row in src.execute("SELECT * FROM checkpoints"):
        dst.execute("INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
    src.close()
    dst.close()
    with Ledger.open(forged, ORIGIN) as lg:
        report = lg.verify()
    assert not report.ok and "do not give" in report.problems[0]
