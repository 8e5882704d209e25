"""Runs as the explorer lists them, and the disputed claims of the ledger (aggregated in SQL, read a page at a time)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, TypedDict

from p2paudit.attest.record import decode_signed
from p2paudit.attest.record_v2 import INIT_INDEX_STEP, VERDICTS
from p2paudit.attest.report import digest_text
from p2paudit.attest.runs import RunInfo
from p2paudit.attest.store import AttestationStore
from p2paudit.attest.views import split_sql
from p2paudit.defaults import DEFAULT_REDUNDANCY
from p2paudit.errors import InputError
from p2paudit.explorer.coverage import Bucket, CoverageStrip, bucket_coverage
from p2paudit.explorer.db import query
from p2paudit.explorer.outcomes import Outcome
from p2paudit.explorer.times import utc_text_ms

MAX_PAGE = 500

# A claim with a finding: disputed (two or more keys, two or more outcomes), or any key's mismatch (a lone
# auditor that caught a lie is a finding, not "0 disputes").
_MISMATCH = VERDICTS.index("mismatch")
_SPLIT = split_sql("i.")
_DISPUTED = (
    "SELECT r.run_id AS run_id, i.run AS run, i.step AS step, COUNT(DISTINCT i.key) AS keys, "
    f"COUNT(*) AS attestations, {_SPLIT} AS disputed FROM attest_index i JOIN attest_runs r ON r.run = i.run "
    "{where}"
    f"GROUP BY i.run, i.step HAVING {_SPLIT} OR MAX(i.verdict = {_MISMATCH}) ORDER BY i.run, i.step"
)


@dataclass(frozen=True)
class InitSummary:
    """The attestations of a run's initial state (subject "init"): how many, by verdict."""

    attestations: int
    match: int
    mismatch: int
    error: int


@dataclass(frozen=True)
class RunSummary:
    run: RunInfo
    totals: Bucket
    init: InitSummary
    last_leaf: int | None
    last_time_ms: int | None  # the signing time its newest attestation states (the verifier's clock)
    ledger_size: int  # every figure is of the first ledger_size entries

    def to_dict(self) -> dict[str, Any]:
        steps = self.run.steps
        return {
            "run_id": self.run.run_id.hex(),
            "label": self.run.label,
            "steps": steps,
            "totals": asdict(self.totals),
            "percent_checked": round(100.0 * self.totals.checked_steps / steps, 3),
            "init": asdict(self.init),
            "last_leaf": self.last_leaf,
            "last_time_ms": self.last_time_ms,
            "last_time": utc_text_ms(self.last_time_ms),
            "ledger_size": self.ledger_size,
        }


def init_summary(store: AttestationStore, run_id: bytes, size: int) -> InitSummary:
    """The run's init attestations among the first `size` ledger entries."""
    rows = store.conn.execute(
        "SELECT verdict, COUNT(*) FROM attest_index WHERE run = ? AND step = ? AND leaf < ? GROUP BY verdict",
        (store.run_number(run_id), INIT_INDEX_STEP, size),
    ).fetchall()
    counts = {VERDICTS[verdict]: count for verdict, count in rows}
    return InitSummary(sum(counts.values()), counts.get("match", 0), counts.get("mismatch", 0), counts.get("error", 0))


def run_summary(store: AttestationStore, run_id: bytes, strip: CoverageStrip | None = None) -> RunSummary:
    """One run: coverage totals over all its steps (from `strip`, the run's coverage over every step and every
    key, when the caller holds it), its init attestations, its newest entry."""
    if strip is None or (strip.start, strip.stop, strip.trusted_keys) != (0, strip.run.steps, None):
        strip = bucket_coverage(store, run_id, buckets=1, min_count=DEFAULT_REDUNDANCY)
    init = init_summary(store, run_id, strip.ledger_size)  # as of the strip's size, so the counts agree
    last = strip.last_leaf
    init_last = store.conn.execute(
        "SELECT MAX(leaf) FROM attest_index WHERE run = ? AND step = ? AND leaf < ?",
        (store.run_number(run_id), INIT_INDEX_STEP, strip.ledger_size),
    ).fetchone()[0]
    if init_last is not None and (last is None or init_last > last):
        last = init_last
    when = decode_signed(store.ledger.entry(last)).attestation.time_ms if last is not None else None
    return RunSummary(strip.run, strip.totals, init, last, when, strip.ledger_size)


class Publishers(TypedDict):
    publisher: str | None
    publishers: list[str]


def publisher_view(store: AttestationStore, run_id: bytes) -> Publishers:
    """The keys recorded as the run's publisher: `publisher` (the first, or None: unknown) and `publishers` (all).
    Read at each request, not kept per ledger size: registering a run's key appends no entry."""
    keys = store.publishers(run_id)
    return {"publisher": keys[0].hex() if keys else None, "publishers": [key.hex() for key in keys]}


@dataclass(frozen=True)
class DisputedClaim:
    run_id: bytes
    run: int
    step: int  # the index's step: -1 is the initial state
    keys: int
    attestations: int
    disputed: bool  # keys disagree; otherwise every key that checked reported the same mismatch


def disputed_claims(store: AttestationStore, run_id: bytes | None = None) -> list[DisputedClaim]:
    """Every claim with a finding (of one run, or all): disputed, or a mismatch no key disputes; one pass over
    the index, no leaf read."""
    store.check_index_current()
    where, params = "", {}
    if run_id is not None:
        where, params = "WHERE i.run = :run ", {"run": store.run_number(run_id)}
    rows = query(store, _DISPUTED.format(where=where), params)
    return [DisputedClaim(**{**row, "disputed": bool(row["disputed"])}) for row in rows]


def check_page(offset: int, limit: int) -> None:
    if offset < 0 or not 1 <= limit <= MAX_PAGE:
        raise InputError(f"page offset {offset}, limit {limit}: want offset >= 0 and limit 1..{MAX_PAGE}")


def claim_sides(store: AttestationStore, claim: DisputedClaim) -> dict[str, Any]:
    """A disputed claim with its outcomes: who signed what (keys hex, ledger indices), read by primary key."""
    rows = store.conn.execute(
        "SELECT k.public_key, i.verdict, i.observed, i.leaf FROM attest_index i JOIN attest_keys k ON k.key = i.key "
        "WHERE i.run = ? AND i.step = ? ORDER BY i.leaf",
        (claim.run, claim.step),
    ).fetchall()
    sides: dict[tuple[int, bytes | None], Outcome] = {}
    for public_key, verdict, observed, leaf in rows:
        side = sides.setdefault(
            (verdict, observed),
            {"verdict": VERDICTS[verdict], "observed_output_digest": digest_text(observed), "signers": []},
        )
        side["signers"].append({"verifier": public_key.hex(), "index": leaf})
    init = claim.step == INIT_INDEX_STEP
    return {
        "run_id": claim.run_id.hex(),
        "subject": "init" if init else "step",
        "step": 0 if init else claim.step,
        "keys": claim.keys,
        "attestations": claim.attestations,
        "disputed": claim.disputed,
        "sides": list(sides.values()),
    }
