"""The attestation store: signed attestations as ledger leaves, plus index tables for queries.

Leaves are the exact signed envelope bytes (record.SignedAttestation.encoded).
Index tables (see attest.tables) live in the same SQLite file and are written
in the same BEGIN IMMEDIATE transaction as the leaves; entries appended to the
ledger behind the store's back are indexed (and checked) before the next write.

Appending checks everything before writing: size, canonical decoding, the
signature (outside the write lock: it is the expensive part), then inside the
transaction the run is known and the step is in range. A batch is all or
nothing. An exact duplicate of a stored attestation is not stored twice.

`AttestationStore.open_readonly` reads, proves and verifies without writing
anything (SQLite mode=ro): it needs no write permission, and refuses to
answer queries from an index that lags the ledger (entries appended behind
a store's back are indexed by the next write).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ledger import Ledger, LedgerError, NoteSigner, Transaction
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.held import Held, conflict_with, held_for_batch
from p2paudit.attest.record import Attestation, SignedAttestation, decode_signed, sign_attestation
from p2paudit.attest.record_v2 import VERDICTS
from p2paudit.attest.runs import (  # noqa: F401 (MAX_RUN_STEPS re-exported)
    MAX_RUN_STEPS,
    RunInfo,
    check_run,
    find_run,
    known_runs,
    register_run,
    run_publishers,
)
from p2paudit.attest.tables import create_tables, has_table, indexed_size, origin_for  # noqa: F401 (re-exported)
from p2paudit.attest.views import create_views
from p2paudit.errors import InternalError
from p2paudit.identity import Identity

VERDICT_CODE = {name: code for code, name in enumerate(VERDICTS)}


@dataclass(frozen=True)
class Appended:
    """Where an attestation is stored; `new` is False when the same bytes were already there.

    `conflict` (new attestations only) is "equivocation" when its key had
    signed another result for the step, "dispute" when another key had signed
    another outcome, else None: what a node may want to tell its peers about.
    """

    index: int
    new: bool
    conflict: str | None = None


@dataclass(frozen=True)
class _Checked:
    signed: SignedAttestation
    position: int


class AttestationStore:
    """Signed attestations in a ledger file. Open with `AttestationStore.open(path, origin)`.

    Like Ledger, one object is for one thread; several processes or threads
    with their own objects may share one file.
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.conn = ledger.conn
        self._runs: dict[bytes, tuple[int, int]] = {}
        self._keys: dict[bytes, int] = {}
        self._pending_keys: dict[bytes, int] = {}
        if ledger.readonly:
            self._check_tables()
        else:
            self._create_tables()

    @classmethod
    def open(cls, path: Path | str, origin: str | None = None) -> AttestationStore:
        """Open the store at `path`; a new file needs `origin` (see origin_for), an existing one knows its own."""
        stored = read_origin(path)
        if stored is not None and origin is not None and stored != origin:
            raise AttestationError(f"{path} is the ledger of origin {stored!r}, not {origin!r}")
        known = stored if stored is not None else origin
        if known is None:
            raise AttestationError(f"no ledger at {path}")
        ledger = Ledger.open(path, known)
        try:
            return cls(ledger)
        except BaseException:
            ledger.close()
            raise

    @classmethod
    def open_readonly(cls, path: Path | str) -> AttestationStore:
        """Open the existing store at `path` read-only (nothing is created or written; no write permission needed)."""
        if not Path(path).exists():
            raise AttestationError(f"no ledger at {path}")
        try:
            ledger = Ledger.open_readonly(path)
        except LedgerError as exc:
            raise AttestationError(str(exc)) from None
        try:
            return cls(ledger)
        except BaseException:
            ledger.close()
            raise

    def _check_tables(self) -> None:
        if not self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'attest_index'").fetchone():
            raise AttestationError(
                f"ledger {self.ledger.path} has no attestation index yet: "
                "a write (ledger add-run, ledger import) creates it"
            )

    def check_index_current(self) -> None:
        """AttestationError unless the index covers every ledger entry (a read-only store cannot catch up)."""
        indexed, size = indexed_size(self.conn), self.ledger.size
        if indexed != size:
            raise AttestationError(
                f"the attestation index covers {indexed} of the {size} ledger entries; "
                "a write to the ledger (e.g. ledger add-run) indexes the rest"
            )

    def close(self) -> None:
        self.ledger.close()

    def __enter__(self) -> AttestationStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create_tables(self) -> None:
        with self.ledger.transaction() as tx:
            create_tables(tx.conn)
            create_views(tx.conn)  # read-only SQL views for sqlite-utils and datasette (attest.views)

    # -- runs -------------------------------------------------------------------------------------------

    def register_run(self, run_id: bytes, steps: int, label: str = "", publisher: bytes | None = None) -> RunInfo:
        """Make a run known (attestations for unknown runs are refused).

        Registering the same run again with the same number of steps is a
        no-op; a different number of steps is refused (runs are never changed).
        `publisher`: the key that signed the run's manifest (checked by the
        caller), recorded once (a run first made known from its id alone gains
        it later; a manifest re-signed by another key adds that key).
        """
        check_run(run_id, steps, publisher)
        with self.ledger.transaction() as tx:
            return register_run(tx.conn, run_id, steps, label, publisher)

    def runs(self) -> list[RunInfo]:
        """Every known run, in registration order."""
        return known_runs(self.conn)

    def publishers(self, run_id: bytes) -> tuple[bytes, ...]:
        """The keys recorded as the run's publisher (attest.runs.run_publishers)."""
        return run_publishers(self.conn, run_id)

    def run_info(self, run_id: bytes) -> RunInfo:
        """A known run; AttestationError if it is not registered."""
        return find_run(self.conn, run_id)

    def run_number(self, run_id: bytes) -> int:
        """The run's row number in the index tables; AttestationError if the run is not known."""
        self.run_info(run_id)
        return self._run(self.conn, run_id, 0)[0]

    def _run(self, conn: sqlite3.Connection, run_id: bytes, step: int) -> tuple[int, int]:
        cached = self._runs.get(run_id)
        if cached is None:
            row = conn.execute("SELECT run, steps FROM attest_runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise AttestationError(f"attestation for unknown run {run_id.hex()}; register the run first")
            cached = self._runs[run_id] = (row[0], row[1])  # runs never change, so caching is safe
        if step >= cached[1]:
            raise AttestationError(
                f"attestation for step {step}, but run {run_id.hex()[:16]}... has "
                f"{cached[1]} steps (0..{cached[1] - 1})"
            )
        return cached

    def _key(self, conn: sqlite3.Connection, public_key: bytes) -> int:
        number = self._keys.get(public_key) or self._pending_keys.get(public_key)
        if number is None:
            row = conn.execute("SELECT key FROM attest_keys WHERE public_key = ?", (public_key,)).fetchone()
            if row is not None:  # committed by someone (our own inserts in this transaction are pending)
                number = self._keys[public_key] = row[0]
            else:  # we hold the write lock, so nobody can insert it between the two statements
                number = _inserted_row(conn.execute("INSERT INTO attest_keys (public_key) VALUES (?)", (public_key,)))
                # Cached only once committed: a rollback would leave the number pointing at nothing.
                self._pending_keys[public_key] = number
        return number

    # -- appending --------------------------------------------------------------------------------------

    def append(self, data: bytes) -> Appended:
        """Verify and store one signed attestation (see append_many)."""
        return self.append_many([data])[0]

    def append_many(self, items: Sequence[bytes]) -> list[Appended]:
        """Verify and store signed attestations, all or nothing, in one transaction.

        Raises AttestationError naming the first bad item (oversized, malformed,
        non-canonical, unknown version, bad signature, unknown run or step out
        of range); then nothing of the batch is stored.
        """
        checked = [self._check(item, n, len(items)) for n, item in enumerate(items)]
        with self._writing() as tx:
            return self._store(tx, checked)

    def _check(self, data: bytes, position: int, count: int) -> _Checked:
        where = f" (item {position} of {count})" if count > 1 else ""
        try:
            return _Checked(decode_signed(data), position)
        except AttestationError as exc:
            raise AttestationError(f"{exc}{where}") from None

    @contextmanager
    def _writing(self) -> Iterator[Transaction]:
        """A write transaction with the index caught up; key numbers made in it are cached after commit."""
        self._pending_keys = {}
        try:
            with self.ledger.transaction() as tx:
                self._catch_up(tx)
                yield tx
            self._keys.update(self._pending_keys)
        finally:
            self._pending_keys = {}

    def _store(self, tx: Transaction, checked: Sequence[_Checked]) -> list[Appended]:
        runs = []
        for item in checked:
            record = item.signed.attestation
            try:
                runs.append(self._run(tx.conn, record.run_id, record.step)[0])
            except AttestationError as exc:
                raise AttestationError(f"{exc} (item {item.position})" if len(checked) > 1 else str(exc)) from None
        stored = held_for_batch(tx.conn, runs, [item.signed.attestation for item in checked])
        results: list[Appended] = []
        fresh: list[SignedAttestation] = []
        for item, run in zip(checked, runs):
            record, data = item.signed.attestation, item.signed.encoded
            held = stored.setdefault((run, record.index_step), [])  # init: -1
            # Only a leaf of the same key can hold the same bytes.
            same = [h.leaf for h in held if h.verifier == record.verifier and self._bytes_at(h.leaf, fresh, tx) == data]
            if same:
                results.append(Appended(same[0], False))
                continue
            conflict = conflict_with(record, held, lambda leaf: self._bytes_at(leaf, fresh, tx))
            held.append(Held(tx.size + len(fresh), record.verifier, record.verdict, record.observed_output_digest))
            fresh.append(item.signed)
            results.append(Appended(-1, True, conflict))  # index filled in once the leaves are written
        indices = iter(self._append_leaves(tx, fresh))
        return [r if not r.new else Appended(next(indices), True, r.conflict) for r in results]

    def _bytes_at(self, leaf: int, fresh: Sequence[SignedAttestation], tx: Transaction) -> bytes:
        """A stored leaf's bytes, or those of one earlier in this batch (not written yet)."""
        return fresh[leaf - tx.size].encoded if leaf >= tx.size else self.ledger.entry(leaf)

    def _append_leaves(self, tx: Transaction, fresh: Sequence[SignedAttestation]) -> list[int]:
        if not fresh:
            return []
        indices = tx.append_many([signed.encoded for signed in fresh])
        self._index_rows(tx.conn, indices, fresh)
        return indices

    def _index_rows(
        self, conn: sqlite3.Connection, indices: Sequence[int], signed: Sequence[SignedAttestation]
    ) -> None:
        rows = []
        for index, item in zip(indices, signed):
            record = item.attestation
            run, _ = self._run(conn, record.run_id, record.step)
            rows.append(
                (
                    run,
                    record.index_step,
                    self._key(conn, record.verifier),
                    index,
                    VERDICT_CODE[record.verdict],
                    record.observed_output_digest,
                )
            )
        conn.executemany(
            "INSERT INTO attest_index (run, step, key, leaf, verdict, observed) VALUES (?, ?, ?, ?, ?, ?)", rows
        )
        conn.execute("INSERT INTO attest_batches (first_leaf, count) VALUES (?, ?)", (indices[0], len(indices)))

    def _catch_up(self, tx: Transaction) -> None:
        """Index entries that reached the ledger without going through a store (checked like any append)."""
        indexed = indexed_size(tx.conn)
        if indexed == tx.size:
            return
        if indexed > tx.size:
            raise AttestationError(f"attestation index covers {indexed} leaves but the ledger has {tx.size}")
        signed = []
        for offset, data in enumerate(self.ledger.entries(indexed, tx.size)):
            try:
                signed.append(decode_signed(data))
            except AttestationError as exc:
                raise AttestationError(f"ledger entry {indexed + offset} is not a valid attestation: {exc}") from None
        self._index_rows(tx.conn, range(indexed, tx.size), signed)

    def sign_and_append(self, identity: Identity, attestation: Attestation) -> Appended:
        """Sign `attestation` with the node key and store it, unless that would be an equivocation.

        The check and the append are one transaction (the write lock is held
        from the check to the commit), so two threads or processes of one node
        cannot both sign different results for one (run, step). If the node
        already signed the same result, nothing new is signed and the stored
        index is returned (`new` False). A different result raises
        AttestationError and signs nothing.
        """
        if attestation.verifier != identity.public_key:
            raise AttestationError("attestation names another verifier than the signing key")
        with self._writing() as tx:
            run, _ = self._run(tx.conn, attestation.run_id, attestation.step)
            for leaf, signed in self._own_attestations(tx.conn, run, attestation):
                if signed.attestation.result() == attestation.result():
                    return Appended(leaf, False)
                raise AttestationError(
                    f"this node already signed a different result for run {attestation.run_id.hex()[:16]}... "
                    f"step {attestation.step} (ledger entry {leaf}, verdict {signed.attestation.verdict}); "
                    "refusing to equivocate"
                )
            return self._store(tx, [_Checked(sign_attestation(identity, attestation), 0)])[0]

    def _own_attestations(
        self, conn: sqlite3.Connection, run: int, record: Attestation
    ) -> list[tuple[int, SignedAttestation]]:
        rows = conn.execute(
            "SELECT i.leaf FROM attest_index i JOIN attest_keys k ON k.key = i.key "
            "WHERE i.run = ? AND i.step = ? AND k.public_key = ? ORDER BY i.leaf",
            (run, record.index_step, record.verifier),
        ).fetchall()
        return [(leaf, decode_signed(self.ledger.entry(leaf))) for (leaf,) in rows]

    # -- reading ----------------------------------------------------------------------------------------

    def attestation(self, index: int) -> SignedAttestation:
        """The signed attestation at ledger index `index` (verified again on the way out)."""
        try:
            return decode_signed(self.ledger.entry(index))
        except LedgerError as exc:
            raise AttestationError(str(exc)) from None

    def step_attestations(self, run_id: bytes, step: int) -> list[tuple[int, SignedAttestation]]:
        """Every (index, attestation) stored for one step of one run, in ledger order."""
        self.check_index_current()
        run = self.run_number(run_id)
        rows = self.conn.execute(
            "SELECT leaf FROM attest_index WHERE run = ? AND step = ? ORDER BY leaf", (run, step)
        ).fetchall()
        return [(leaf, self.attestation(leaf)) for (leaf,) in rows]

    def checkpoint(self, identity: Identity) -> str:
        """Sign the current tree head with the node key (a C2SP checkpoint note), store it, and return it."""
        return self.ledger.checkpoint(NoteSigner(self.ledger.origin, identity.private_key))


def read_origin(path: Path | str) -> str | None:
    """The origin stored in an existing ledger file (opened read-only), or None if the file does not exist."""
    try:
        return Ledger.stored_origin(path)
    except LedgerError as exc:
        raise AttestationError(str(exc)) from None


def now_ms() -> int:
    """The current unix time in milliseconds, as attestations carry it."""
    return time.time_ns() // 1_000_000


def _inserted_row(cursor: sqlite3.Cursor) -> int:
    """The rowid an INSERT of one row gave (sqlite3 sets lastrowid after every INSERT that adds a row)."""
    if cursor.lastrowid is None:
        raise InternalError("SQLite reported no rowid for an INSERT that added a row")
    return cursor.lastrowid
