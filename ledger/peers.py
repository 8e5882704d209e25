"""Witnessing peers' checkpoints: trust on first use, consistency from then on, split views kept as evidence.

For each (verifier key, origin) the ledger keeps every checkpoint it accepted.
A new one is accepted only with a valid consistency proof between it and the
largest one held (in whichever direction the sizes go); the first from a key
is accepted on trust. A consistency proof from the empty tree does not
exist (ledger.merkle refuses one): a held checkpoint of size 0 is extended
by any tree, so the next one is accepted with an empty proof, and a
checkpoint of size 0 must carry the empty tree's root. A checkpoint of the same size as one held but with a
different root is a split view: signed proof that the log showed two
histories. It is stored beside the first (never replacing it) and reported.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ledger.errors import CheckpointError, ProofError
from ledger.merkle import EMPTY_ROOT, verify_consistency
from ledger.note import Checkpoint, NoteVerifier, open_checkpoint

FIRST = "first"  # trust on first use
CONSISTENT = "consistent"
DUPLICATE = "duplicate"  # same size and root as one held: nothing new stored
SPLIT_VIEW = "split_view"


@dataclass(frozen=True)
class PeerCheckpointResult:
    """What happened to a peer's checkpoint: status is first, consistent, duplicate or split_view."""

    status: str
    checkpoint: Checkpoint
    conflicts: tuple[str, ...] = ()  # for a split view: the notes held at the same size with other roots

    @property
    def split_view(self) -> bool:
        return self.status == SPLIT_VIEW


@dataclass(frozen=True)
class SplitView:
    """Two or more roots signed by one key for one origin and size: the notes are the evidence."""

    vkey: str
    origin: str
    size: int
    roots: tuple[bytes, ...]
    notes: tuple[str, ...]


MAX_STORED_SIZE = 2**63 - 1  # SQLite's largest integer: no ledger holds more entries


def check_storable(cp: Checkpoint) -> None:
    """CheckpointError unless a ledger can hold cp's size (a checkpoint may claim up to 2^64 - 1, C2SP)."""
    if cp.size > MAX_STORED_SIZE:
        raise CheckpointError(
            f"checkpoint of {cp.origin[:100]} claims size {cp.size}, beyond the 2^63 - 1 entries a ledger holds"
        )


def insert_checkpoint(
    conn: sqlite3.Connection, kind: str, status: str, cp: Checkpoint, vkey: str, note: str, now: str
) -> None:
    """Store a checkpoint row (append-only: the id is the next one). Precondition: inside a transaction."""
    check_storable(cp)
    next_id = conn.execute("SELECT COALESCE(MAX(id) + 1, 1) FROM checkpoints").fetchone()[0]
    conn.execute(
        "INSERT INTO checkpoints (id, kind, status, origin, size, root, vkey, note, recorded_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (next_id, kind, status, cp.origin, cp.size, cp.root, vkey, note, now),
    )


def add_peer_checkpoint(
    conn: sqlite3.Connection, note_text: str, verifier: NoteVerifier, proof: list[bytes], now: str
) -> PeerCheckpointResult:
    """Verify the note's signature, check it against what is held from the same key, and store it.

    Raises CheckpointError for a bad note or signature and ProofError for a
    consistency proof that fails; in both cases nothing is stored.
    Precondition: inside a transaction (the caller's BEGIN IMMEDIATE).
    """
    cp = open_checkpoint(note_text, [verifier])
    check_storable(cp)
    if cp.size == 0 and cp.root != EMPTY_ROOT:
        raise CheckpointError(
            f"checkpoint of {cp.origin} at size 0 has root {cp.root.hex()[:16]}.., "
            f"not the empty tree's {EMPTY_ROOT.hex()[:16]}.."
        )
    key = (verifier.vkey, cp.origin)
    same_size = conn.execute(
        "SELECT root, note FROM checkpoints WHERE kind = 'peer' AND vkey = ? AND origin = ? AND size = ? ORDER BY id",
        (*key, cp.size),
    ).fetchall()
    if any(root == cp.root for root, _ in same_size):
        return PeerCheckpointResult(DUPLICATE, cp)
    if same_size:
        insert_checkpoint(conn, "peer", SPLIT_VIEW, cp, verifier.vkey, note_text, now)
        return PeerCheckpointResult(SPLIT_VIEW, cp, tuple(note for _, note in same_size))
    held = conn.execute(
        "SELECT size, root FROM checkpoints WHERE kind = 'peer' AND vkey = ? AND origin = ? AND status != ? "
        "ORDER BY size DESC, id ASC LIMIT 1",
        (*key, SPLIT_VIEW),
    ).fetchone()
    if held is None:
        status = FIRST
    else:
        held_size, held_root = held
        if min(held_size, cp.size) == 0:  # every tree extends the empty tree: there is nothing to prove
            if len(proof):
                raise ProofError(
                    f"consistency between sizes {held_size} and {cp.size} takes no proof "
                    f"(one is the empty tree), got {len(proof)} hashes"
                )
        elif cp.size > held_size:
            verify_consistency(held_size, cp.size, proof, held_root, cp.root)
        else:
            verify_consistency(cp.size, held_size, proof, cp.root, held_root)
        status = CONSISTENT
    insert_checkpoint(conn, "peer", status, cp, verifier.vkey, note_text, now)
    return PeerCheckpointResult(status, cp)


def read_split_views(conn: sqlite3.Connection) -> list[SplitView]:
    """Every (vkey, origin, size) with more than one root among the stored checkpoints."""
    groups = conn.execute(
        "SELECT vkey, origin, size FROM checkpoints GROUP BY vkey, origin, size "
        "HAVING COUNT(DISTINCT root) > 1 ORDER BY vkey, origin, size"
    ).fetchall()
    views = []
    for vkey, origin, size in groups:
        rows = conn.execute(
            "SELECT root, note FROM checkpoints WHERE vkey = ? AND origin = ? AND size = ? ORDER BY id",
            (vkey, origin, size),
        ).fetchall()
        roots = tuple(dict.fromkeys(root for root, _ in rows))
        views.append(SplitView(vkey, origin, size, roots, tuple(note for _, note in rows)))
    return views
