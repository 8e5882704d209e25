"""A run's coverage aggregated into N buckets of consecutive steps, in SQL (one pass over the run's index rows).

Steps [lo, hi) are cut into n buckets (n <= hi - lo): step s falls in bucket
floor((s - lo) * n / (hi - lo)), so bucket b holds steps
[lo + ceil(b (hi - lo) / n), lo + ceil((b + 1) (hi - lo) / n)), at least one.
Per step, as attest.queries defines them: *checked* = distinct keys that
signed a match or a mismatch, *disputed* = two or more keys with a result and
two or more results (verdict, observed digest); an error is no result. Per bucket: sums of the per-step counts
and counts of steps. With a trust filter every count is over those keys only.

The same aggregation draws the page's strip and `ledger coverage --png`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import Any

from p2paudit.attest.runs import RunInfo
from p2paudit.attest.store import AttestationStore
from p2paudit.attest.views import split_sql
from p2paudit.errors import InputError
from p2paudit.explorer.db import json_list

MAX_BUCKETS = 4000

_PER_STEP = (
    "SELECT step, COUNT(*) AS n, MAX(leaf) AS last, "
    "COUNT(DISTINCT key) FILTER (WHERE verdict < 2) AS c, COUNT(DISTINCT key) FILTER (WHERE verdict = 0) AS m, "
    "COUNT(DISTINCT key) FILTER (WHERE verdict = 1) AS x, COUNT(DISTINCT key) FILTER (WHERE verdict = 2) AS e, "
    "COUNT(DISTINCT key) AS k, " + split_sql("") + " AS d "
    "FROM attest_index WHERE run = :run AND step >= :lo AND step < :hi{keys} GROUP BY step"
)
# d: disputed (attest.views.split_sql): two or more keys with results, and two or more results; errors aside.
_BUCKETS = (
    "WITH per_step AS ({per_step}) SELECT (step - :lo) * :n / (:hi - :lo) AS bucket, COUNT(*) AS attested, "
    "SUM(c > 0) AS checked, SUM(c >= :min) AS covered, SUM(c) AS checks, SUM(m) AS matches, SUM(x) AS mismatches, "
    "SUM(e) AS errors, SUM(x > 0) AS mismatch_steps, SUM(IFNULL(d, 0)) AS disputed, SUM(n) AS attestations, "
    "MAX(last) AS last_leaf FROM per_step GROUP BY bucket ORDER BY bucket"
)


@dataclass(frozen=True)
class Bucket:
    """Steps [start, stop) of a run: how many were checked, by how many keys, with what outcomes."""

    start: int
    stop: int
    steps: int
    attested_steps: int  # steps with any attestation (errors included)
    checked_steps: int  # steps checked (match or mismatch) by at least one key
    covered_steps: int  # steps checked by at least `min` distinct keys
    unchecked_steps: int  # steps - checked_steps
    checks: int  # distinct checking keys, summed over the steps
    matches: int
    mismatches: int
    errors: int
    mismatch_steps: int  # steps with at least one mismatch
    disputed_steps: int  # steps with two or more keys with a result and two or more results (errors aside)
    attestations: int  # index rows (every stored attestation)


@dataclass(frozen=True)
class CoverageStrip:
    """A run's coverage over steps [start, stop) in buckets, and the totals of the range."""

    run: RunInfo
    start: int
    stop: int
    min_count: int
    trusted_keys: int | None  # how many of the trusted keys the ledger knows; None: every key counts
    buckets: tuple[Bucket, ...]
    totals: Bucket
    last_leaf: int | None  # the newest ledger entry of the run in the range
    ledger_size: int  # the counts are of the first ledger_size entries (one read snapshot)

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run.run_id.hex(),
            "label": self.run.label,
            "steps": self.run.steps,
            "from": self.start,
            "to": self.stop,
            "min": self.min_count,
            "trusted_only": self.trusted_keys is not None,
            "trusted_keys": self.trusted_keys,
            "bucket_count": len(self.buckets),
            "steps_per_bucket": (self.stop - self.start) / max(1, len(self.buckets)),
            "totals": asdict(self.totals),
            "last_leaf": self.last_leaf,
            "ledger_size": self.ledger_size,
            "buckets": [asdict(b) for b in self.buckets],
        }


def strip_from_dict(data: dict[str, Any], run: RunInfo) -> CoverageStrip:
    """A strip back from its `to_dict` form (a saved overview); KeyError, TypeError or ValueError when it is not one
    of this run (the caller drops it)."""
    if data["run_id"] != run.run_id.hex() or data["steps"] != run.steps:
        raise ValueError(f"a saved strip of run {str(data['run_id'])[:16]}, not of {run.run_id.hex()[:16]}")
    buckets = tuple(Bucket(**{f.name: int(item[f.name]) for f in fields(Bucket)}) for item in data["buckets"])
    if len(buckets) != data["bucket_count"] or not buckets:
        raise ValueError("a saved strip whose buckets do not add up")
    trusted, last = data["trusted_keys"], data["last_leaf"]
    return CoverageStrip(
        run,
        int(data["from"]),
        int(data["to"]),
        int(data["min"]),
        None if trusted is None else int(trusted),
        buckets,
        _total(int(data["from"]), int(data["to"]), buckets),
        None if last is None else int(last),
        int(data["ledger_size"]),
    )


def check_range(run: RunInfo, start: int | None, stop: int | None, buckets: int) -> tuple[int, int, int]:
    """(start, stop, buckets) with defaults filled in; InputError naming the numbers if out of range."""
    lo = 0 if start is None else start
    hi = run.steps if stop is None else stop
    if not 0 <= lo < hi <= run.steps:
        raise InputError(f"step range [{lo}, {hi}) is not within run of {run.steps} steps (0..{run.steps - 1})")
    if not 1 <= buckets <= MAX_BUCKETS:
        raise InputError(f"{buckets} buckets asked for, want 1..{MAX_BUCKETS}")
    return lo, hi, min(buckets, hi - lo)


def trusted_key_numbers(store: AttestationStore, trusted: frozenset[bytes]) -> list[int]:
    """The index's numbers of the trusted keys it knows (keys it never saw count nothing)."""
    rows = store.conn.execute("SELECT key, public_key FROM attest_keys").fetchall()
    return [number for number, public in rows if public in trusted]


def bucket_coverage(
    store: AttestationStore,
    run_id: bytes,
    start: int | None = None,
    stop: int | None = None,
    buckets: int = 1000,
    min_count: int = 1,
    trusted: frozenset[bytes] | None = None,
) -> CoverageStrip:
    """Coverage of steps [start, stop) of a known run in `buckets` buckets (fewer when the range is shorter)."""
    if min_count < 1:
        raise InputError(f"minimum coverage is {min_count}, want >= 1")
    with snapshot(store):
        return _bucket_coverage(store, run_id, start, stop, buckets, min_count, trusted)


@contextmanager
def snapshot(store: AttestationStore) -> Iterator[None]:
    """One read transaction: the size and the counts read inside it are of the same ledger (WAL snapshot)."""
    store.conn.execute("BEGIN")
    try:
        yield
    finally:
        store.conn.execute("COMMIT")


def _bucket_coverage(
    store: AttestationStore,
    run_id: bytes,
    start: int | None,
    stop: int | None,
    buckets: int,
    min_count: int,
    trusted: frozenset[bytes] | None,
) -> CoverageStrip:
    store.check_index_current()
    size = store.ledger.size
    run = store.run_info(run_id)
    lo, hi, n = check_range(run, start, stop, buckets)
    params: dict[str, int | str] = {"run": store.run_number(run_id), "lo": lo, "hi": hi, "n": n, "min": min_count}
    keys_filter, known = "", None
    if trusted is not None:
        numbers = trusted_key_numbers(store, trusted)
        keys_filter, known = " AND key IN (SELECT value FROM json_each(:keys))", len(numbers)
        params["keys"] = json_list(numbers)
    sql = _BUCKETS.format(per_step=_PER_STEP.format(keys=keys_filter))
    found = {row[0]: row[1:] for row in store.conn.execute(sql, params)}
    made = tuple(_bucket(lo, hi, n, b, found.get(b)) for b in range(n))
    last = max((row[-1] for row in found.values() if row[-1] is not None), default=None)
    return CoverageStrip(run, lo, hi, min_count, known, made, _total(lo, hi, made), last, size)


def _bucket(lo: int, hi: int, n: int, b: int, row: tuple[int, ...] | None) -> Bucket:
    width = hi - lo
    first, end = lo + -(-b * width // n), lo + -(-(b + 1) * width // n)
    attested, checked, covered, checks, matches, mismatches, errors, mm_steps, disputed, rows, _ = row or (0,) * 11
    return Bucket(
        first,
        end,
        end - first,
        attested,
        checked,
        covered,
        end - first - checked,
        checks,
        matches,
        mismatches,
        errors,
        mm_steps,
        disputed,
        rows,
    )


def _total(lo: int, hi: int, made: tuple[Bucket, ...]) -> Bucket:
    sums = {f.name: sum(getattr(b, f.name) for b in made) for f in fields(Bucket)}
    return Bucket(**{**sums, "start": lo, "stop": hi})
