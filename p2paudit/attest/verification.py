"""Full check of an attestation store: the Merkle tree, every signature, and the index tables.

The ledger's own check (ledger.Ledger.verify) recomputes the tree and the
stored checkpoints. On top of it, every entry must be a canonical, correctly
signed attestation, and the index row for each indexed leaf must say exactly
what the signed bytes say (a tampered index would skew coverage silently).
The first bad entry index is reported.
"""

from __future__ import annotations

from dataclasses import dataclass

from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record import decode_signed
from p2paudit.attest.store import VERDICT_CODE, AttestationStore
from p2paudit.attest.tables import indexed_size


@dataclass(frozen=True)
class StoreReport:
    """Outcome of verify_store: ok, size, root (when the tree is intact), the first bad index, problems."""

    ok: bool
    size: int
    root: bytes | None
    first_bad_index: int | None
    problems: tuple[str, ...]
    attestations_checked: int

    def first_problem(self) -> str:
        return self.problems[0] if self.problems else ""


def verify_store(store: AttestationStore) -> StoreReport:
    """Recompute everything (read only): O(n) time, O(log n) memory besides SQLite's."""
    tree = store.ledger.verify()
    problems = list(tree.problems)
    bad = [tree.first_bad_index] if tree.first_bad_index is not None else []
    store.conn.execute("BEGIN")  # one read snapshot for both cursors, even while others append
    try:
        checked, attest_problems, attest_bad = _check_attestations(store, tree.size)
    finally:
        store.conn.execute("COMMIT")
    problems += attest_problems
    bad += attest_bad
    first_bad = min(bad) if bad else None
    return StoreReport(not problems, tree.size, tree.root, first_bad, tuple(problems), checked)


def _check_attestations(store: AttestationStore, size: int) -> tuple[int, list[str], list[int]]:
    indexed = min(indexed_size(store.conn), size)
    rows = store.conn.execute(
        "SELECT i.leaf, r.run_id, i.step, k.public_key, i.verdict, i.observed FROM attest_index i "
        "JOIN attest_runs r ON r.run = i.run JOIN attest_keys k ON k.key = i.key ORDER BY i.leaf"
    )
    problems: list[str] = []
    bad: list[int] = []
    row = rows.fetchone()
    checked = 0
    for index, data in enumerate(store.ledger.entries(0, size)):
        try:
            record = decode_signed(data).attestation
        except AttestationError as exc:
            problems.append(f"entry {index}: {exc}")
            bad.append(index)
            break  # the first bad index is what is reported; later ones add nothing
        checked += 1
        if index >= indexed:
            continue
        want = (
            index,
            record.run_id,
            record.index_step,
            record.verifier,
            VERDICT_CODE[record.verdict],
            record.observed_output_digest,
        )
        if row is None or tuple(row) != want:
            problems.append(f"entry {index}: its index row does not match the signed attestation")
            bad.append(index)
            break
        row = rows.fetchone()
    if not problems and row is not None:
        problems.append(f"index row for leaf {row[0]} has no entry (or a second row) in a ledger of size {size}")
        bad.append(min(row[0], size))
    return checked, problems, bad
