"""The SQLite ledger: appends, hooks and transactions, proofs against the naive reference, limits, reopening."""

from __future__ import annotations

import random
import sqlite3
import tempfile
from pathlib import Path

import ledger_naive as naive
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import MAX_ENTRY_BYTES, Ledger, LedgerError, merkle
from ledger.errors import AppendOnlyError, CorruptLedgerError, LedgerInvariantError
from ledger.note import NoteSigner, open_checkpoint

ORIGIN = "example.org/ledger-test"


@pytest.fixture
def ledger(tmp_path):
    with Ledger.open(tmp_path / "l.db", ORIGIN) as lg:
        yield lg


def _entries(n: int, seed: int = 0) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(0, 60)) for _ in range(n)]


def test_store_proofs_equal_the_naive_reference_for_every_size_to_70(ledger):
    entries = _entries(70)
    rng = random.Random(5)
    for i, e in enumerate(entries):
        if i % 3 == 0:
            assert ledger.append(e) == i
        else:
            assert ledger.append_many([e]) == [i]
    assert ledger.size == 70
    for size in range(0, 71):
        root = naive.mth(entries[:size])
        assert ledger.root(size) == root
        for index in range(size):
            proof = ledger.inclusion_proof(index, size)
            assert proof == naive.path(index, entries[:size])
            merkle.verify_inclusion(merkle.leaf_hash(entries[index]), index, size, proof, root)
        for size1 in rng.sample(range(1, size + 1), min(size, 8)) + ([0] if size == 0 else []):
            proof = ledger.consistency_proof(size1, size)
            assert proof == naive.proof(size1, entries[:size])
            merkle.verify_consistency(size1, size, proof, naive.mth(entries[:size1]), root)


def test_random_pairs_in_a_bigger_ledger(ledger):
    entries = _entries(1000, 3)
    assert ledger.append_many(entries[:600]) == list(range(600))
    assert ledger.append_many(entries[600:]) == list(range(600, 1000))
    hashes = [merkle.leaf_hash(e) for e in entries]
    provider = merkle.subtree_hasher(hashes)
    rng = random.Random(9)
    for _ in range(40):
        size2 = rng.randrange(1, 1001)
        size1 = rng.randrange(1, size2 + 1)
        index = rng.randrange(size2)
        assert ledger.root(size2) == merkle.root_from_leaf_hashes(hashes[:size2])
        assert ledger.inclusion_proof(index, size2) == merkle.inclusion_proof(index, size2, provider)
        assert ledger.consistency_proof(size1, size2) == merkle.consistency_proof(size1, size2, provider)
    assert ledger.consistency_proof(500) == merkle.consistency_proof(500, 1000, provider)
    assert ledger.root() == naive.mth(entries)


def test_entries_read_back_exactly(ledger):
    entries = _entries(30, 4) + [b"", bytes(MAX_ENTRY_BYTES)]
    ledger.append_many(entries)
    assert [ledger.entry(i) for i in range(len(entries))] == entries
    assert list(ledger.entries()) == entries
    assert list(ledger.entries(5, 9)) == entries[5:9]
    with pytest.raises(LedgerError, match="entry 32 is not in the ledger of size 32"):
        ledger.entry(32)
    with pytest.raises(LedgerError, match=r"entries \[5, 40\) are not within the ledger of size 32"):
        ledger.entries(5, 40)


def test_entry_size_limit_and_type(ledger):
    ledger.append(b"ok")
    with pytest.raises(LedgerError, match=f"entry 1 has {MAX_ENTRY_BYTES + 1} bytes, limit {MAX_ENTRY_BYTES}"):
        ledger.append(bytes(MAX_ENTRY_BYTES + 1))
    with pytest.raises(LedgerError, match="entry 3 is str, want bytes"):
        ledger.append_many([b"a", b"b", "c"])
    assert ledger.size == 1  # the whole batch was refused, nothing half-stored
    assert ledger.verify().ok


def test_hook_runs_in_the_same_transaction(ledger):
    ledger.conn.execute("CREATE TABLE my_index (idx INTEGER PRIMARY KEY, tag TEXT)")

    def hook(conn: sqlite3.Connection, index: int) -> None:
        conn.execute("INSERT INTO my_index VALUES (?, ?)", (index, f"tag{index}"))

    assert ledger.append(b"a", hook) == 0
    assert ledger.append_many([b"b", b"c"], hook) == [1, 2]
    assert ledger.conn.execute("SELECT idx, tag FROM my_index").fetchall() == [(0, "tag0"), (1, "tag1"), (2, "tag2")]


def test_a_failing_hook_stores_nothing(ledger):
    ledger.append(b"before")
    root = ledger.root()
    ledger.conn.execute("CREATE TABLE my_index (idx INTEGER PRIMARY KEY)")

    def hook(conn, index):
        conn.execute("INSERT INTO my_index VALUES (?)", (index,))
        if index == 2:
            raise ValueError("caller refuses entry 2")

    with pytest.raises(ValueError, match="caller refuses entry 2"):
        ledger.append_many([b"x", b"y"], hook)
    with pytest.raises(ValueError):
        ledger.append(b"z", lambda conn, i: (_ for _ in ()).throw(ValueError("no")))
    assert ledger.size == 1 and ledger.root() == root
    assert ledger.conn.execute("SELECT COUNT(*) FROM my_index").fetchone()[0] == 0
    assert ledger.conn.execute("SELECT COUNT(*) FROM nodes").fetchone()[0] == 0
    assert ledger.append(b"after") == 1
    assert ledger.verify().ok


def test_transaction_checks_and_appends_atomically(ledger):
    ledger.conn.execute("CREATE TABLE seen (key TEXT PRIMARY KEY, idx INTEGER)")

    def add_once(key: str, entry: bytes) -> int | None:
        with ledger.transaction() as tx:
            if tx.conn.execute("SELECT 1 FROM seen WHERE key = ?", (key,)).fetchone():
                return None
            index = tx.append(entry)
            tx.conn.execute("INSERT INTO seen VALUES (?, ?)", (key, index))
            return index

    assert add_once("a", b"A") == 0
    assert add_once("a", b"A again") is None
    assert add_once("b", b"B") == 1
    with pytest.raises(RuntimeError):
        with ledger.transaction() as tx:
            tx.append(b"C")
            raise RuntimeError("abort")
    assert ledger.size == 2
    with pytest.raises(LedgerInvariantError, match="already open"):
        with ledger.transaction():
            ledger.append(b"nested")
    assert ledger.size == 2


def test_two_connections_append_to_one_file(tmp_path):
    path = tmp_path / "shared.db"
    with Ledger.open(path, ORIGIN) as a, Ledger.open(path, ORIGIN) as b:
        for i in range(20):
            (a if i % 3 else b).append(b"e%d" % i)
        assert a.size == b.size == 20
        assert a.root() == b.root() == naive.mth([b"e%d" % i for i in range(20)])
        assert a.verify().ok


def test_reopen_keeps_everything_and_checks_origin(tmp_path):
    path = tmp_path / "l.db"
    with Ledger.open(path, ORIGIN) as lg:
        lg.append_many(_entries(10))
        root = lg.root()
    with Ledger.open(path, ORIGIN) as lg:
        assert lg.size == 10 and lg.root() == root
        assert lg.append(b"more") == 10
    with pytest.raises(LedgerError, match="is the ledger of origin 'example.org/ledger-test', not 'other'"):
        Ledger.open(path, "other")


def test_schema_has_magic_and_version_and_refuses_foreign_files(tmp_path):
    path = tmp_path / "l.db"
    Ledger.open(path, ORIGIN).close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT magic, version, origin FROM ledger_schema").fetchall() == [
        ("p2paudit-ledger", 1, ORIGIN)
    ]
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    other = tmp_path / "other.db"
    c = sqlite3.connect(other)
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    with pytest.raises(LedgerError, match="is a SQLite database of something else"):
        Ledger.open(other, ORIGIN)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(CorruptLedgerError, match="is not a p2paudit ledger: it is not a SQLite database"):
        Ledger.open(junk, ORIGIN)
    with pytest.raises(LedgerError, match="does not exist"):
        Ledger.open(tmp_path / "missing" / "l.db", ORIGIN)
    with pytest.raises(LedgerError, match="origin"):
        Ledger.open(tmp_path / "x.db", "two\nlines")


def test_bad_sizes_are_refused_with_numbers(ledger):
    ledger.append_many(_entries(5))
    with pytest.raises(LedgerError, match="tree size 6 is not within the ledger of size 5"):
        ledger.root(6)
    with pytest.raises(LedgerError, match="entry 5 is not in a tree of size 5"):
        ledger.inclusion_proof(5)
    with pytest.raises(LedgerError, match="entry 3 is not in a tree of size 3"):
        ledger.inclusion_proof(3, 3)
    with pytest.raises(LedgerError, match="no consistency proof from size 4 to size 3"):
        ledger.consistency_proof(4, 3)
    with pytest.raises(LedgerError, match="tree size is str, want an integer"):
        ledger.root("3")
    with pytest.raises(LedgerError, match="entry index is float, want an integer"):
        ledger.inclusion_proof(1.0)
    with pytest.raises(LedgerError, match="entry index is NoneType"):
        ledger.entry(None)
    assert ledger.root(0) == merkle.EMPTY_ROOT
    assert ledger.consistency_proof(5) == [] and ledger.consistency_proof(0, 0) == []
    with pytest.raises(LedgerError, match="no consistency proof from the empty tree to size 5"):
        ledger.consistency_proof(0)


def test_checkpoint_signs_the_current_tree_head(ledger):
    signer = NoteSigner(ORIGIN, Ed25519PrivateKey.generate())
    assert ledger.latest_checkpoint() is None
    empty_note = ledger.checkpoint(signer)
    assert open_checkpoint(empty_note, signer.verifier).size == 0
    ledger.append_many(_entries(13))
    note = ledger.checkpoint(signer)
    cp = open_checkpoint(note, [signer.verifier])
    assert (cp.origin, cp.size, cp.root) == (ORIGIN, 13, ledger.root())
    assert ledger.latest_checkpoint() == note
    report = ledger.verify()
    assert report.ok and report.checkpoints_checked == 2 and report.size == 13 and report.root == ledger.root()


def test_append_only_error_when_the_database_refuses(ledger):
    ledger.append(b"a")
    # A forged interior hash planted ahead of time (its guard trigger dropped first): when the append
    # completes that subtree, the no-overwrite trigger refuses, and the whole append is rolled back.
    ledger.conn.execute("DROP TRIGGER nodes_within_size")
    ledger.conn.execute("INSERT INTO nodes VALUES (1, 0, ?)", (bytes(32),))
    with pytest.raises(AppendOnlyError, match="append at index 1 refused by the database: .*node already stored"):
        ledger.append(b"b")
    assert ledger.size == 1
    report = ledger.verify()
    assert not report.ok and report.first_bad_index == 1, report.problems


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=24), min_size=1, max_size=12), min_size=1, max_size=12), st.data())
def test_property_any_append_sequence_gives_the_naive_tree(batches, data):
    entries: list[bytes] = []
    with tempfile.TemporaryDirectory() as tmp, Ledger.open(Path(tmp) / "prop.db", ORIGIN) as lg:
        for batch in batches:
            if len(batch) == 1:
                lg.append(batch[0])
            else:
                lg.append_many(batch)
            entries.extend(batch)
            size = data.draw(st.integers(1, len(entries)), label="size")
            index = data.draw(st.integers(0, size - 1), label="index")
            old = data.draw(st.integers(1, size), label="old")
            assert lg.root(size) == naive.mth(entries[:size])
            assert lg.inclusion_proof(index, size) == naive.path(index, entries[:size])
            assert lg.consistency_proof(old, size) == naive.proof(old, entries[:size])
        assert lg.verify().ok


def test_reading_many_stored_hashes_at_once(ledger):
    # More ranges than one compound SELECT may hold (SQLite's default limit is 500 terms).
    from ledger.store import read_complete_hashes

    ledger.append_many([b"%d" % i for i in range(3000)])
    hashes = [merkle.leaf_hash(b"%d" % i) for i in range(3000)]
    ranges = (
        [(i, i + 2) for i in range(0, 2998, 2)]
        + [(i, i + 8) for i in range(0, 2992, 8)]
        + [(i, i + 1) for i in range(700)]
    )
    got = read_complete_hashes(ledger.conn, ranges)
    assert len(got) == len(set(ranges))
    for a, b in ranges:
        assert got[(a, b)] == merkle.root_from_leaf_hashes(hashes[a:b])
    with pytest.raises(CorruptLedgerError, match=r"the stored hash of leaves \[2048, 4096\) is missing"):
        read_complete_hashes(ledger.conn, [(0, 2048), (2048, 4096)])


def test_a_refused_append_cannot_be_committed_half_way(ledger):
    ledger.append_many([b"a", b"b", b"c"])
    ledger.conn.execute("DROP TRIGGER nodes_within_size")
    ledger.conn.execute("INSERT INTO nodes VALUES (2, 0, ?)", (bytes(32),))  # forged: refused when [0, 4) completes
    with pytest.raises(LedgerInvariantError, match="rolled back: an append in it was refused"):
        with ledger.transaction() as tx:
            try:
                tx.append_many([b"d", b"e"])  # entry rows go in, then the node insert is refused
            except AppendOnlyError:
                pass  # a caller that swallows the error must still not commit half a batch
            with pytest.raises(LedgerInvariantError, match="can only roll back"):
                tx.append(b"f")
    assert ledger.size == 3
