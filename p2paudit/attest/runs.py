"""The runs a store knows: registered once with their number of steps, never changed.

An attestation for an unknown run, or for a step past the run's end, is
refused, so every run is registered first (by its id and step count, from a
signed manifest or from the id alone). Its publisher keys, the keys that
signed its manifest, are recorded beside it (attest_publishers).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from p2paudit.attest.errors import AttestationError
from p2paudit.attest.tables import has_table
from p2paudit.errors import InputError

# A run has at most 2^32 steps (= run.manifest.MAX_STEPS: the schedule counts steps below 2^32; attest
# does not import run, and tests/attest hold the two equal). A larger count would make coverage allocate per step.
MAX_RUN_STEPS = 2**32


@dataclass(frozen=True)
class RunInfo:
    """A known run: its 32-byte id, number of steps (steps 0..steps-1) and a free-form label."""

    run_id: bytes
    steps: int
    label: str


def check_run(run_id: bytes, steps: int, publisher: bytes | None) -> None:
    """Refuse a run id that is not 32 bytes, a step count outside 1..2^32, a publisher key not 32 bytes."""
    if publisher is not None and (type(publisher) is not bytes or len(publisher) != 32):
        raise AttestationError(f"publisher key of run {run_id.hex()[:16]}... is not 32 bytes")
    if type(run_id) is not bytes or len(run_id) != 32:
        raise AttestationError(f"run id has {len(run_id) if isinstance(run_id, bytes) else '?'} bytes, want 32")
    if type(steps) is not int or not 1 <= steps <= MAX_RUN_STEPS:
        raise AttestationError(f"run {run_id.hex()[:16]}... has {steps} steps, want 1 to {MAX_RUN_STEPS} (2^32)")


def register_run(conn: sqlite3.Connection, run_id: bytes, steps: int, label: str, publisher: bytes | None) -> RunInfo:
    """Insert the run unless known, inside the caller's write transaction; the run as stored.

    Precondition: check_run passed. A known run with another number of steps
    is refused (and its publisher not recorded).
    """
    row = conn.execute("SELECT steps, label FROM attest_runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        conn.execute("INSERT INTO attest_runs (run_id, steps, label) VALUES (?, ?, ?)", (run_id, steps, label))
        record_publisher(conn, run_id, publisher)
        return RunInfo(run_id, steps, label)
    if row[0] != steps:
        raise AttestationError(f"run {run_id.hex()[:16]}... is registered with {row[0]} steps, not {steps}")
    record_publisher(conn, run_id, publisher)
    return RunInfo(run_id, row[0], row[1])


def record_publisher(conn: sqlite3.Connection, run_id: bytes, publisher: bytes | None) -> None:
    """Record the run's publisher key unless known (inside the write transaction that registers the run)."""
    if publisher is None:
        return
    (run,) = conn.execute("SELECT run FROM attest_runs WHERE run_id = ?", (run_id,)).fetchone()
    known = conn.execute(
        "SELECT 1 FROM attest_publishers WHERE run = ? AND public_key = ?", (run, publisher)
    ).fetchone()
    if known is None:
        conn.execute("INSERT INTO attest_publishers (run, public_key) VALUES (?, ?)", (run, publisher))


def known_runs(conn: sqlite3.Connection) -> list[RunInfo]:
    """Every known run, in registration order."""
    rows = conn.execute("SELECT run_id, steps, label FROM attest_runs ORDER BY run").fetchall()
    return [RunInfo(*row) for row in rows]


def run_publishers(conn: sqlite3.Connection, run_id: bytes) -> tuple[bytes, ...]:
    """The keys recorded as the run's publisher (usually one; none when it was made known from its id alone,
    or by a ledger written before they were recorded, which a read-only store cannot add the table to)."""
    if not has_table(conn, "attest_publishers"):
        return ()
    rows = conn.execute(
        "SELECT p.public_key FROM attest_publishers p JOIN attest_runs r ON r.run = p.run WHERE r.run_id = ? "
        "ORDER BY p.public_key",
        (run_id,),
    ).fetchall()
    return tuple(bytes(key) for (key,) in rows)


def find_run(conn: sqlite3.Connection, run_id: bytes) -> RunInfo:
    """A known run; AttestationError if it is not registered."""
    row = conn.execute("SELECT run_id, steps, label FROM attest_runs WHERE run_id = ?", (run_id,)).fetchone()
    if row is None:
        raise AttestationError(f"run {run_id.hex()} is not known to this ledger")
    return RunInfo(*row)


MAX_CANDIDATES_SHOWN = 8


def resolve_run_id(known: Sequence[RunInfo], text: str) -> bytes:
    """The one known run whose hex id starts with `text` (a whole id or a prefix, optionally "sha256:").

    The one resolver of run ids the CLI takes: an unknown or ambiguous prefix
    is an InputError (exit 2) that lists the candidates.
    """
    prefix = text.strip().removeprefix("sha256:").lower()
    if not prefix or len(prefix) > 64 or any(c not in "0123456789abcdef" for c in prefix):
        raise InputError(f"run id {text[:80]!r} is not hex (a run id, or a prefix of one, up to 64 hex digits)")
    found = [run for run in known if run.run_id.hex().startswith(prefix)]
    if len(found) == 1:
        return found[0].run_id
    if not found:
        if not known:
            raise InputError(f"run {prefix[:16]} is not known: the ledger knows no runs (p2paudit ledger add-run)")
        raise InputError(f"run {prefix[:16]} is not known (no run id starts with it); known: {_candidates(known)}")
    raise InputError(f"run id prefix {prefix} names {len(found)} runs: {_candidates(found)}; give more digits")


def _candidates(runs: Sequence[RunInfo]) -> str:
    shown = ", ".join(f"{run.run_id.hex()[:16]} ({run.label or 'no label'})" for run in runs[:MAX_CANDIDATES_SHOWN])
    more = len(runs) - MAX_CANDIDATES_SHOWN
    return shown + (f" and {more} more (p2paudit ledger runs)" if more > 0 else "")
