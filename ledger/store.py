"""The ledger: an append-only RFC 9162 Merkle log of opaque byte entries in one SQLite file.

Entries, their leaf hashes and the hash of every complete subtree (stored as
it completes) live in append-only tables (see ledger.schema), so the root and
proofs at any past size cost O(log n) primary-key reads. Every write is one
BEGIN IMMEDIATE transaction; a caller's hook runs inside it, so callers can
keep their own index tables in step with the log atomically.

A Ledger object is not safe for use from two threads at once; several
processes may share one file (SQLite serialises their writes). Open with
`Ledger.open` to write, `Ledger.open_readonly` to read, prove and verify
without any write permission (see ledger.database). SQLite's refusals become
one-line LedgerErrors that say what is wrong (read-only, disk full, locked,
not a ledger, corrupt).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ledger import database, merkle, peers, schema, verification
from ledger.errors import AppendOnlyError, CorruptLedgerError, LedgerError, LedgerInvariantError
from ledger.note import Checkpoint, NoteSigner, NoteVerifier, sign_checkpoint
from ledger.peers import PeerCheckpointResult, SplitView
from ledger.verification import VerifyReport

MAX_ENTRY_BYTES = 64 * 1024
_UNION_CHUNK = 200

Hook = Callable[[sqlite3.Connection, int], None]
"""Called as hook(conn, index) inside the append's transaction; raising aborts the whole append."""


def read_size(conn: sqlite3.Connection) -> int:
    """The number of entries (max index + 1: an O(log n) b-tree lookup, not a count)."""
    size: int = conn.execute("SELECT COALESCE(MAX(idx) + 1, 0) FROM entries").fetchone()[0]
    return size


def read_complete_hashes(conn: sqlite3.Connection, ranges: Iterable[merkle.Range]) -> dict[merkle.Range, bytes]:
    """Hashes of complete aligned subtrees in two queries (leaves, then interior nodes), keyed by range.

    Raises CorruptLedgerError naming the first range whose hash is not stored.
    """
    wanted = sorted(set(ranges))
    leaves = [a for a, b in wanted if b - a == 1]
    nodes = [((b - a).bit_length() - 1, a) for a, b in wanted if b - a > 1]
    found: dict[merkle.Range, bytes] = {}
    for chunk in range(0, len(leaves), _UNION_CHUNK):
        part = leaves[chunk : chunk + _UNION_CHUNK]
        marks = ",".join("?" * len(part))
        for idx, h in conn.execute(f"SELECT idx, leaf_hash FROM entries WHERE idx IN ({marks})", part):
            found[(idx, idx + 1)] = h
    # UNION ALLs of primary-key lookups (a row-value IN (VALUES ...) would scan the whole table),
    # in chunks below SQLite's default limit of 500 terms in one compound SELECT.
    for chunk in range(0, len(nodes), _UNION_CHUNK):
        node_part = nodes[chunk : chunk + _UNION_CHUNK]
        query = " UNION ALL ".join(["SELECT level, idx, hash FROM nodes WHERE level = ? AND idx = ?"] * len(node_part))
        params = [v for level, a in node_part for v in (level, a >> level)]
        for level, idx, h in conn.execute(query, params):
            found[(idx << level, (idx + 1) << level)] = h
    for a, b in wanted:
        if (a, b) not in found:
            raise CorruptLedgerError(f"the stored hash of leaves [{a}, {b}) is missing", a)
    return found


def hash_ranges(conn: sqlite3.Connection, ranges: list[merkle.Range]) -> list[bytes]:
    """MTH of each range (as in proofs and roots), from the stored complete subtrees fetched in one go."""
    stored = read_complete_hashes(conn, [sub for a, b in ranges for sub in merkle.complete_subtrees(a, b)])
    return [merkle.range_hash(a, b, lambda s, e: stored[(s, e)]) for a, b in ranges]


def _check_int(value: int, what: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LedgerError(f"{what} is {type(value).__name__}, want an integer")


def _check_entry(entry: bytes, position: int) -> bytes:
    if not isinstance(entry, (bytes, bytearray, memoryview)):
        raise LedgerError(f"entry {position} is {type(entry).__name__}, want bytes")
    entry = bytes(entry)
    if len(entry) > MAX_ENTRY_BYTES:
        raise LedgerError(f"entry {position} has {len(entry)} bytes, limit {MAX_ENTRY_BYTES}")
    return entry


class Transaction:
    """An open BEGIN IMMEDIATE transaction: `.conn` for the caller's own statements, `.append(entry)`."""

    def __init__(self, conn: sqlite3.Connection, path: str = "") -> None:
        self.conn = conn
        self.path = path
        self.size = read_size(conn)
        self.failed = False  # set when the database refused an append: the transaction must not commit
        # The right edge of the tree, read once per transaction so other writers' appends are seen.
        ranges = merkle.compact_ranges(self.size)
        stored = read_complete_hashes(conn, ranges)
        self._frontier = [((b - a).bit_length() - 1, stored[(a, b)]) for a, b in ranges]

    def append(self, entry: bytes) -> int:
        """Append one entry in this transaction; return its index."""
        return self.append_many([entry])[0]

    def append_many(self, entries: Iterable[bytes]) -> list[int]:
        """Append entries in order in this transaction; return their indices.

        All entries are checked before anything is written. If the database
        refuses a row, AppendOnlyError is raised and the transaction is marked
        failed: rows of the batch may already be in it, so it cannot commit.
        """
        if self.failed:
            raise LedgerInvariantError("an earlier append in this transaction was refused; it can only roll back")
        first, size, frontier = self.size, self.size, list(self._frontier)
        leaf_rows, node_rows = [], []
        for entry in entries:
            data = _check_entry(entry, size)
            lh = merkle.leaf_hash(data)
            leaf_rows.append((size, lh, data))
            node_rows.extend(merkle.push_leaf(frontier, size, lh))
            size += 1
        try:
            # Entries first: the nodes trigger refuses a subtree reaching past the stored entries.
            self.conn.executemany("INSERT INTO entries (idx, leaf_hash, data) VALUES (?, ?, ?)", leaf_rows)
            self.conn.executemany("INSERT INTO nodes (level, idx, hash) VALUES (?, ?, ?)", node_rows)
        except sqlite3.IntegrityError as e:  # a trigger or constraint: the append-only rules
            self.failed = True
            raise AppendOnlyError(f"append at index {first} refused by the database: {e}") from None
        except sqlite3.Error as e:  # disk full, I/O error...
            self.failed = True
            raise database.describe_error(e, self.path, f"store entries from index {first}") from None
        self.size, self._frontier = size, frontier
        return list(range(first, size))

    def root(self) -> bytes:
        """The root of the tree as it stands in this transaction."""
        return merkle.fold_compact_range([h for _, h in self._frontier])


class Ledger:
    """An append-only Merkle log in SQLite. Open with `Ledger.open(path, origin)`."""

    def __init__(self, conn: sqlite3.Connection, origin: str, path: str, readonly: bool = False) -> None:
        self.conn = conn
        self.origin = origin
        self.path = path
        self.readonly = readonly
        self._in_transaction = False

    @classmethod
    def open(cls, path: str | Path, origin: str) -> Ledger:
        """Open (creating if needed) the ledger file at `path` for the log named `origin`.

        An existing file must carry the ledger magic, version and the same origin.
        """
        Checkpoint(origin, 0, merkle.EMPTY_ROOT)  # validates the origin as a checkpoint's first line
        path = str(path)
        if path != ":memory:" and not Path(path).parent.is_dir():
            raise LedgerError(f"directory of ledger {path} does not exist")
        conn = database.connect(path)
        try:
            schema.ensure_schema(conn, origin, path)
        except BaseException:
            conn.close()
            raise
        return cls(conn, origin, path)

    @classmethod
    def open_readonly(cls, path: str | Path, origin: str | None = None) -> Ledger:
        """Open the existing ledger file at `path` read-only (SQLite mode=ro): nothing is created or written.

        Needs no write permission on the file or its directory. With `origin`,
        the file must be the log of that origin. Writing through the returned
        object is refused (LedgerInvariantError).
        """
        path = str(path)
        if not Path(path).exists():
            raise LedgerError(f"no ledger at {path}")
        conn = database.connect(path, readonly=True)
        try:
            stored = schema.read_schema(conn, path)
        except BaseException:
            conn.close()
            raise
        if origin is not None and stored != origin:
            conn.close()
            raise LedgerError(f"{path} is the ledger of origin {stored!r}, not {origin!r}")
        return cls(conn, stored, path, readonly=True)

    @staticmethod
    def stored_origin(path: str | Path) -> str | None:
        """The origin of the existing ledger at `path` (read-only), or None if there is no file."""
        if not Path(path).exists():
            return None
        with Ledger.open_readonly(path) as found:
            return found.origin

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def size(self) -> int:
        return read_size(self.conn)

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """BEGIN IMMEDIATE ... COMMIT around the block; any exception rolls everything back and propagates."""
        if self.readonly:
            raise LedgerInvariantError(f"ledger {self.path} was opened read-only; a write transaction was asked of it")
        if self._in_transaction:
            raise LedgerInvariantError("a ledger transaction is already open on this connection")
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise database.describe_error(e, self.path, "start a write transaction") from None
        self._in_transaction = True
        try:
            tx = Transaction(self.conn, self.path)
            yield tx
            if tx.failed:
                raise LedgerInvariantError(
                    "ledger transaction rolled back: an append in it was refused by the database "
                    "and the caller carried on"
                )
            try:
                self.conn.execute("COMMIT")
            except sqlite3.Error as e:
                raise database.describe_error(e, self.path, "commit, so this transaction stored nothing") from None
        except BaseException:
            if self.conn.in_transaction:  # SQLite may already have rolled back (e.g. disk full)
                self.conn.execute("ROLLBACK")
            raise
        finally:
            self._in_transaction = False

    def append(self, entry: bytes, hook: Hook | None = None) -> int:
        """Append one entry (at most MAX_ENTRY_BYTES) and return its index; hook(conn, index) runs in the same transaction."""
        return self.append_many([entry], hook)[0]

    def append_many(self, entries: Iterable[bytes], hook: Hook | None = None) -> list[int]:
        """Append entries in one transaction; hook(conn, index) runs for each, in order, before the commit."""
        with self.transaction() as tx:
            indices = tx.append_many(entries)
            if hook is not None:
                for index in indices:
                    hook(tx.conn, index)
        return indices

    def entry(self, index: int) -> bytes:
        """The bytes of entry `index`; LedgerError if there is none."""
        _check_int(index, "entry index")
        row = None
        if abs(index) < 2**63:  # SQLite cannot bind a larger integer (OverflowError); no ledger holds one
            row = self.conn.execute("SELECT data FROM entries WHERE idx = ?", (index,)).fetchone()
        if row is None:
            raise LedgerError(f"entry {index} is not in the ledger of size {self.size}")
        data: bytes = row[0]
        return data

    def entries(self, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        """The bytes of entries [start, stop) in order (stop defaults to the current size)."""
        size = self.size
        stop = size if stop is None else stop
        _check_int(start, "start")
        _check_int(stop, "stop")
        if not 0 <= start <= stop <= size:
            raise LedgerError(f"entries [{start}, {stop}) are not within the ledger of size {size}")
        cursor = self.conn.execute("SELECT data FROM entries WHERE idx >= ? AND idx < ? ORDER BY idx", (start, stop))
        return (data for (data,) in cursor)

    def _resolve_size(self, size: int | None) -> int:
        current = self.size
        if size is None:
            return current
        _check_int(size, "tree size")
        if not 0 <= size <= current:
            raise LedgerError(f"tree size {size} is not within the ledger of size {current}")
        return size

    def root(self, size: int | None = None) -> bytes:
        """The RFC 9162 root of the first `size` entries (default: all), from O(log n) stored hashes."""
        size = self._resolve_size(size)
        return hash_ranges(self.conn, [(0, size)])[0] if size else merkle.EMPTY_ROOT

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The proof that entry `index` is in the tree of `size` entries (default: all)."""
        size = self._resolve_size(size)
        _check_int(index, "entry index")
        if not 0 <= index < size:
            raise LedgerError(f"entry {index} is not in a tree of size {size}")
        return hash_ranges(self.conn, merkle.inclusion_path(index, size))

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """The proof that the tree of `old_size` entries is a prefix of the tree of `new_size` (default: all)."""
        new_size = self._resolve_size(new_size)
        _check_int(old_size, "old tree size")
        if not 0 <= old_size <= new_size:
            raise LedgerError(f"no consistency proof from size {old_size} to size {new_size}")
        return hash_ranges(self.conn, merkle.consistency_path(old_size, new_size))

    def checkpoint(self, signer: NoteSigner) -> str:
        """Sign the current tree head as a C2SP checkpoint note, store it, and return the note."""
        with self.transaction() as tx:
            cp = Checkpoint(self.origin, tx.size, tx.root())
            note = sign_checkpoint(cp, signer)
            peers.insert_checkpoint(tx.conn, "own", "own", cp, signer.verifier.vkey, note, _now())
        return note

    def latest_checkpoint(self) -> str | None:
        """The note of the last checkpoint this ledger signed, or None before the first."""
        row = self.conn.execute("SELECT note FROM checkpoints WHERE kind = 'own' ORDER BY id DESC LIMIT 1").fetchone()
        return row[0] if row else None

    def add_peer_checkpoint(
        self, note_text: str, verifier: NoteVerifier, consistency_proof: list[bytes]
    ) -> PeerCheckpointResult:
        """Witness a peer's checkpoint: see ledger.peers.add_peer_checkpoint."""
        with self.transaction() as tx:
            return peers.add_peer_checkpoint(tx.conn, note_text, verifier, consistency_proof, _now())

    def split_views(self) -> list[SplitView]:
        """Every (key, origin, size) for which two different roots were signed, with the notes as evidence."""
        return peers.read_split_views(self.conn)

    def verify(self) -> VerifyReport:
        """Recompute the whole tree from the stored entries and check every stored hash and checkpoint."""
        if self._in_transaction:
            raise LedgerInvariantError("verify() cannot run inside a ledger transaction")
        return verification.verify_ledger(self.conn)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
