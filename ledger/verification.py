"""Full verification of a ledger file: recompute the tree from the entries and check everything stored.

Streams the entries in index order, recomputing every leaf hash and every
complete-subtree hash, and compares them with the stored ones (one cursor per
tree level, so memory is O(log n)). Then checks every stored checkpoint's
signature, and for the ledger's own checkpoints the root at their size. The
first entry index that does not fit is reported.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ledger import merkle
from ledger.errors import CheckpointError, CorruptLedgerError
from ledger.note import NoteVerifier, open_checkpoint


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of Ledger.verify(): ok, the size and recomputed root, and the problems found."""

    ok: bool
    size: int  # as stored: the highest index + 1
    root: bytes | None  # recomputed from the entries when they are intact
    first_bad_index: int | None
    problems: tuple[str, ...]
    entries_checked: int  # entries recomputed before the first problem (all of them when ok)
    nodes_checked: int
    checkpoints_checked: int

    def raise_for_problems(self) -> None:
        """Raise CorruptLedgerError (with the first bad index) unless the ledger verified."""
        if not self.ok:
            raise CorruptLedgerError(f"ledger does not verify: {self.problems[0]}", self.first_bad_index)


class _Findings:
    def __init__(self) -> None:
        self.problems: list[str] = []
        self.first_bad: int | None = None

    def add(self, message: str, index: int | None) -> None:
        self.problems.append(message)
        if index is not None and (self.first_bad is None or index < self.first_bad):
            self.first_bad = index


def _next_node(cursors: dict[int, sqlite3.Cursor], conn: sqlite3.Connection, level: int) -> tuple[int, bytes] | None:
    if level not in cursors:
        cursors[level] = conn.execute("SELECT idx, hash FROM nodes WHERE level = ? ORDER BY idx", (level,))
    row: tuple[int, bytes] | None = cursors[level].fetchone()
    return row


def _check_tree(
    conn: sqlite3.Connection, sizes_wanted: set[int], found: _Findings
) -> tuple[int, int, dict[int, bytes]]:
    """Recompute leaves and nodes; return (entries checked, nodes checked, roots at the wanted sizes and at the end)."""
    frontier: list[tuple[int, bytes]] = []
    cursors: dict[int, sqlite3.Cursor] = {}
    roots = {0: merkle.EMPTY_ROOT} if 0 in sizes_wanted else {}
    expected, nodes = 0, 0
    for idx, stored_leaf, data in conn.execute("SELECT idx, leaf_hash, data FROM entries ORDER BY idx"):
        if idx != expected:
            found.add(f"entry {expected} is missing (next stored index is {idx})", expected)
            return expected, nodes, roots
        leaf = merkle.leaf_hash(data)
        if leaf != stored_leaf:
            found.add(f"entry {idx}: its bytes do not match its stored leaf hash", idx)
            return expected, nodes, roots
        for level, k, h in merkle.push_leaf(frontier, idx, leaf):
            nodes += 1
            row = _next_node(cursors, conn, level)
            first, end = k << level, (k + 1) << level
            if row is None or row[0] != k:
                found.add(f"the stored hash of leaves [{first}, {end}) is missing", first)
                return expected, nodes, roots
            if row[1] != h:
                found.add(f"entries [{first}, {end}) do not match their stored interior hash", first)
                return expected, nodes, roots
        expected += 1
        if expected in sizes_wanted:
            roots[expected] = merkle.fold_compact_range([h for _, h in frontier])
    roots[expected] = merkle.fold_compact_range([h for _, h in frontier])
    beyond = conn.execute("SELECT level, idx FROM nodes WHERE ((idx + 1) << level) > ? LIMIT 1", (expected,)).fetchone()
    if beyond is not None:
        level, k = beyond
        found.add(
            f"a stored hash covers leaves [{k << level}, {(k + 1) << level}) but only {expected} entries remain",
            expected,
        )
    return expected, nodes, roots


def _check_checkpoints(conn: sqlite3.Connection, size: int, roots: dict[int, bytes], found: _Findings) -> int:
    rows = conn.execute("SELECT id, kind, origin, size, root, vkey, note FROM checkpoints ORDER BY id").fetchall()
    for cid, kind, origin, cp_size, root, vkey, note in rows:
        try:
            cp = open_checkpoint(note, [NoteVerifier.from_vkey(vkey)])
        except CheckpointError as e:
            found.add(f"checkpoint {cid}: {e}", None)
            continue
        if (cp.origin, cp.size, cp.root) != (origin, cp_size, root):
            found.add(f"checkpoint {cid}: stored origin, size or root differ from its signed note", None)
        elif kind == "own" and cp_size > size:
            found.add(f"checkpoint {cid} signed size {cp_size} but only {size} entries are stored", size)
        elif kind == "own" and cp_size in roots and roots[cp_size] != root:
            # A consistent rewrite of history below cp_size: the entries agree with each other, not with the signature.
            found.add(f"checkpoint {cid} signed a root at size {cp_size} that the stored entries do not give", None)
    return len(rows)


def verify_ledger(conn: sqlite3.Connection) -> VerifyReport:
    """Check the whole ledger behind `conn` (read only, inside one read transaction for a stable snapshot)."""
    found = _Findings()
    conn.execute("BEGIN")
    try:
        own_sizes = {r[0] for r in conn.execute("SELECT size FROM checkpoints WHERE kind = 'own'")}
        size = conn.execute("SELECT COALESCE(MAX(idx) + 1, 0) FROM entries").fetchone()[0]
        checked_entries, nodes, roots = _check_tree(conn, own_sizes, found)
        full_root = None if found.problems else roots[size]
        checked = _check_checkpoints(conn, size, roots, found)
    finally:
        if conn.in_transaction:
            conn.execute("COMMIT")
    problems = tuple(found.problems)
    return VerifyReport(not problems, size, full_root, found.first_bad, problems, checked_entries, nodes, checked)
