"""History sync: pages of a peer's log proved against its signed checkpoint, then stored (protocol /p2paudit/sync/1.0.0).

A page is entries [start, end) of a tree of `size` leaves plus a compact-range
proof: the hashes of the RFC 9162 tree's nodes that lie wholly left of the
range, then those wholly right of it, in tree order. The verifier hashes the
entries itself, rebuilds the root from those three parts and compares it with
the checkpoint's root. Which nodes they are (range_proof_ranges) is separate
from hashing them, as in ledger.merkle: about 2 log2(size) hashes per page,
whatever its length.

The client side is a state machine with no I/O (SyncSession): the network
adapter sends what `next_request()` returns and feeds the answer to
`handle_response()`; a persistent cursor (SyncCursor) records how much of
each peer's log is held, so an interrupted sync resumes where it stopped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ledger import Checkpoint, Ledger, LedgerError, NoteVerifier, open_checkpoint
from ledger.errors import CheckpointError
from ledger.note import parse_note
from ledger.peers import check_storable
from ledger.store import hash_ranges
from p2paudit.attest.codec import unpack
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record import decode_attestation, decode_signed
from p2paudit.attest.store import Appended, AttestationStore
from p2paudit.errors import InternalError
from p2paudit.node.protocols.page_proof import (
    PageProofError as PageProofError,
)
from p2paudit.node.protocols.page_proof import (
    Range as Range,
)
from p2paudit.node.protocols.page_proof import (
    range_proof_ranges as range_proof_ranges,
)
from p2paudit.node.protocols.page_proof import (
    root_from_range as root_from_range,
)
from p2paudit.node.protocols.page_proof import (
    verify_page as verify_page,
)
from p2paudit.node.wire import (
    MAX_PAGE,
    MAX_PAGE_BYTES,
    MAX_STATUS_BYTES,
    SYNC,
    Page,
    PeerRefused,
    RangeProof,
    RangeRequest,
    StatusRequest,
    StatusResponse,
    SyncRefusal,
    WireError,
    decode_sync_request,
    decode_sync_response,
    encode_sync_request,
    encode_sync_response,
    origin_public_key,
)

if TYPE_CHECKING:
    from p2paudit.node.net import Node

# -- server --------------------------------------------------------------------------------------------------


def _ledger(store: AttestationStore | Ledger) -> Ledger:
    return store.ledger if isinstance(store, AttestationStore) else store


def page_for(store: AttestationStore | Ledger, start: int, count: int, size: int | None = None) -> Page:
    """Entries [start, start + count) of the tree of `size` entries (default: all), with their range proof.

    The page is cut short (never empty) where it would pass MAX_PAGE entries
    or the encoded page would pass MAX_PAGE_BYTES. LedgerError if the range
    is not within the ledger.
    """
    ledger = _ledger(store)
    size = ledger.size if size is None else size
    count = min(count, MAX_PAGE, size - start)
    if type(start) is not int or start < 0 or count < 1:
        raise LedgerError(f"entries from {start} (count {count}) are not within a tree of size {size}")
    entries: list[bytes] = []
    budget = MAX_PAGE_BYTES - 2 * 64 * 34 - 64
    for entry in ledger.entries(start, start + count):
        if entries and budget < len(entry) + 3:
            break
        entries.append(entry)
        budget -= len(entry) + 3
    left, right = range_proof_ranges(start, start + len(entries), size)
    hashes = hash_ranges(ledger.conn, left + right) if left or right else []
    return Page(start, tuple(entries), RangeProof(tuple(hashes[: len(left)]), tuple(hashes[len(left) :])))


def serve_sync(store: AttestationStore, request: bytes, note: str) -> bytes:
    """Answer one sync request with this node's signed checkpoint `note` (status) or a page under it.

    A malformed request raises WireError (the adapter drops the stream); a
    range beyond the checkpoint is answered with a refusal.
    """
    decoded = decode_sync_request(request)
    if isinstance(decoded, StatusRequest):
        runs = tuple((run.run_id, run.steps) for run in store.runs())
        return encode_sync_response(StatusResponse(note, runs))
    size = Checkpoint.from_body(parse_note(note).text).size
    if decoded.size > size:
        return encode_sync_response(SyncRefusal(f"range asks for tree size {decoded.size}, this node signed {size}"))
    return encode_sync_response(page_for(store, decoded.start, decoded.count, decoded.size))


# -- client --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Applied:
    """What a page added: per stored entry its Appended (conflicts included), and entries skipped
    because they are for runs (or steps) this store does not know."""

    appended: tuple[Appended, ...]
    skipped: int

    @property
    def new(self) -> int:
        return sum(1 for a in self.appended if a.new)


def apply_page(store: AttestationStore, entries: Sequence[bytes]) -> Applied:
    """Check every signature and store the entries with append_many (held ones are not duplicated).

    Entries for runs the store does not know, or steps beyond a known run,
    are verified and skipped (the peer may audit runs this node does not
    follow). A bad signature or malformed entry raises AttestationError and
    stores nothing of the page.
    """
    runs = {run.run_id: run.steps for run in store.runs()}
    kept, skipped = [], 0
    for n, entry in enumerate(entries):
        try:
            _, body, _ = unpack(entry, "signed attestation")
            record = decode_attestation(body)
        except (AttestationError, ValueError, TypeError):
            decode_signed(entry)  # raises the precise reason
            raise AttestationError(f"page entry {n} is not a signed attestation") from None
        if record.step < runs.get(record.run_id, 0):
            kept.append(entry)
        else:
            decode_signed(entry)  # verified all the same: a forged entry marks a bad peer
            skipped += 1
    return Applied(tuple(store.append_many(kept)) if kept else (), skipped)


class SyncCursor:
    """How many entries of each peer's log (by origin) this node holds: append-only rows in the store's file."""

    DDL = (
        "CREATE TABLE IF NOT EXISTS node_sync_cursor (id INTEGER PRIMARY KEY, origin TEXT NOT NULL, "
        "fetched INTEGER NOT NULL CHECK (fetched >= 0), size INTEGER NOT NULL, root BLOB NOT NULL, "
        "recorded_at TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS node_sync_cursor_by_origin ON node_sync_cursor (origin, id)",
        "CREATE TRIGGER IF NOT EXISTS node_sync_cursor_no_update BEFORE UPDATE ON node_sync_cursor "
        "BEGIN SELECT RAISE(ABORT, 'node_sync_cursor is append-only: UPDATE refused'); END",
        "CREATE TRIGGER IF NOT EXISTS node_sync_cursor_no_delete BEFORE DELETE ON node_sync_cursor "
        "BEGIN SELECT RAISE(ABORT, 'node_sync_cursor is append-only: DELETE refused'); END",
    )

    def __init__(self, store: AttestationStore) -> None:
        self.store = store
        with store.ledger.transaction() as tx:
            for statement in self.DDL:
                tx.conn.execute(statement)

    def fetched(self, origin: str) -> int:
        """Entries 0..n-1 of the peer's log that were stored (or skipped) here: the next sync starts at n."""
        row = self.store.conn.execute(
            "SELECT fetched FROM node_sync_cursor WHERE origin = ? ORDER BY id DESC LIMIT 1", (origin,)
        ).fetchone()
        return row[0] if row else 0

    def record(self, origin: str, fetched: int, checkpoint: Checkpoint) -> None:
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with self.store.ledger.transaction() as tx:
            _insert_cursor(tx.conn, origin, fetched, checkpoint, now)


def _insert_cursor(conn: sqlite3.Connection, origin: str, fetched: int, cp: Checkpoint, now: str) -> None:
    conn.execute(
        "INSERT INTO node_sync_cursor (origin, fetched, size, root, recorded_at) VALUES (?, ?, ?, ?, ?)",
        (origin, fetched, cp.size, cp.root, now),
    )


def open_peer_checkpoint(note: str) -> Checkpoint:
    """A peer's checkpoint note verified under the key its origin names (p2paudit ledger origins only)."""
    try:
        origin = note.split("\n", 1)[0]
        verifier = NoteVerifier(origin, origin_public_key(origin))
        cp = open_checkpoint(note, [verifier])
        check_storable(cp)  # a size no ledger holds is a lie, not our bug
        return cp
    except CheckpointError as exc:
        raise PageProofError(f"peer checkpoint refused: {exc}") from None


@dataclass
class SyncSession:
    """One sync with one peer: status, then pages from the cursor up to the peer's checkpoint.

    Drive it with `next_request()` (None when done) and `handle_response(data)`.
    Each page is verified and stored before the cursor moves, so an
    interruption at any point loses nothing and resumes from the cursor.
    """

    store: AttestationStore
    cursor: SyncCursor
    page_size: int = MAX_PAGE
    checkpoint: Checkpoint | None = None
    note: str | None = None  # the peer's signed checkpoint note, once its status is in
    position: int = 0
    applied: list[Applied] = field(default_factory=list)
    _waiting: RangeRequest | StatusRequest | None = None

    def next_request(self) -> bytes | None:
        if self.checkpoint is None:
            self._waiting = StatusRequest()
        elif self.position < self.checkpoint.size:
            count = min(self.page_size, MAX_PAGE, self.checkpoint.size - self.position)
            self._waiting = RangeRequest(self.checkpoint.size, self.position, count)
        else:
            return None
        return encode_sync_request(self._waiting)

    def handle_response(self, data: bytes) -> None:
        """Verify and apply one response; PageProofError, WireError or AttestationError mark a bad peer,
        PeerRefused one that declined."""
        response = decode_sync_response(data)
        if isinstance(response, SyncRefusal):  # declined, not lied: never banned for it
            raise PeerRefused(f"peer refused the sync request: {response.reason[:200]}")
        if isinstance(self._waiting, StatusRequest):
            if not isinstance(response, StatusResponse):
                raise WireError(f"peer answered a status request with a {type(response).__name__}")
            self.checkpoint = open_peer_checkpoint(response.note)
            self.note = response.note
            self.position = min(self.cursor.fetched(self.checkpoint.origin), self.checkpoint.size)
        elif isinstance(self._waiting, RangeRequest):
            if not isinstance(response, Page):
                raise WireError(f"peer answered a range request with a {type(response).__name__}")
            want, checkpoint = self._waiting, self.checkpoint
            if checkpoint is None:  # next_request asks for a range only under a checkpoint
                raise InternalError("a range request is outstanding with no peer checkpoint")
            if response.start != want.start or len(response.entries) > want.count:
                raise PageProofError(
                    f"page starts at {response.start} with {len(response.entries)} entries, "
                    f"asked for {want.count} from {want.start}"
                )
            entries = verify_page(checkpoint, response.start, response.entries, response.proof)
            self.applied.append(apply_page(self.store, entries))
            self.position = response.start + len(entries)
            self.cursor.record(checkpoint.origin, self.position, checkpoint)
        else:
            raise WireError("sync response arrived with no request outstanding")
        self._waiting = None


# -- the asking end (through net's face) ----------------------------------------------------------------------


async def ask_status(node: Node, peer: str) -> tuple[StatusResponse, int]:
    """`peer`'s status (its signed checkpoint and runs) and the answer's size. PeerRefused for a refusal,
    WireError for anything but a status; what Node.ask raises."""
    answer = await node.ask(peer, SYNC, encode_sync_request(StatusRequest()), max_answer=MAX_STATUS_BYTES)
    response = decode_sync_response(answer)
    if isinstance(response, SyncRefusal):
        raise PeerRefused(f"peer refused the status request: {response.reason[:200]}")
    if not isinstance(response, StatusResponse):
        raise WireError(f"peer answered a status request with a {type(response).__name__}")
    return response, len(answer)


async def ask_page(node: Node, peer: str, request: bytes) -> bytes:
    """The answer to one request of a SyncSession (SyncSession.handle_response checks it)."""
    return await node.ask(peer, SYNC, request)
