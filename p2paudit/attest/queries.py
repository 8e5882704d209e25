"""Questions asked of an attestation store: coverage, disputes, equivocations.

Definitions (what the CLI reports):

- A step is *checked* by a key when the key signed a match or a mismatch for
  it (it replayed the step and compared); "error" attestations are counted on
  their own but check nothing. Coverage counts distinct keys, never
  attestations, and is reported for all keys (untrusted: keys are free to
  make) and, given a trust list, for trusted keys only.
- A *dispute*: two different keys signed different outcomes (verdict and
  observed digest) for one step of one run. With two or more keys and two or
  more outcomes for a step, such a pair always exists.
- An *equivocation*: one key signed two different results (record.result())
  for one step, or one log key signed two roots for one tree size (the
  ledger's split views).

Every query refuses to answer from an index that lags the ledger
(store.check_index_current), so a read-only store never reports stale counts.
Evidence is the signed bytes themselves; `check_dispute` and
`check_equivocation` let anybody verify a claimed conflict from the bytes
alone, with no database.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from ledger import SplitView
from p2paudit.attest.record import decode_signed
from p2paudit.attest.record_v2 import INIT_INDEX_STEP, VERDICTS
from p2paudit.attest.runs import RunInfo
from p2paudit.attest.store import AttestationStore
from p2paudit.attest.views import split_sql
from p2paudit.errors import InputError
from p2paudit.identity import parse_public_key_hex


@dataclass(frozen=True)
class StepCoverage:
    """Distinct keys per verdict for one step; `checked` counts keys with a match or a mismatch."""

    step: int
    match: int
    mismatch: int
    error: int
    checked: int


@dataclass(frozen=True)
class Coverage:
    """Coverage of one run by one set of keys (all keys, or trusted keys only)."""

    run: RunInfo
    trusted_only: bool
    min_count: int
    per_step: tuple[StepCoverage, ...]  # only steps with at least one attestation, in step order
    keys: int  # distinct keys that attested any step of the run
    initial_state: StepCoverage | None = None  # the init claim (state 0 as the recipe builds it); None: unattested

    @property
    def checked_once(self) -> int:
        return sum(1 for s in self.per_step if s.checked >= 1)

    @property
    def checked_min(self) -> int:
        return sum(1 for s in self.per_step if s.checked >= self.min_count)

    @property
    def with_mismatch(self) -> int:
        return sum(1 for s in self.per_step if s.mismatch)

    def percent(self, count: int) -> float:
        return 100.0 * count / self.run.steps


def load_trusted_keys(path: Path | str) -> frozenset[bytes]:
    """Trusted verifier keys: one hex public key per line; '#' starts a comment; blank lines are skipped."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise InputError(f"trust file {path} does not exist") from None
    except UnicodeDecodeError:
        raise InputError(f"trust file {path} is not text") from None
    keys = set()
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            keys.add(parse_public_key_hex(text))
        except InputError as exc:
            raise InputError(f"trust file {path} line {number}: {exc}") from None
    return frozenset(keys)


def coverage(
    store: AttestationStore, run_id: bytes, trusted: frozenset[bytes] | None = None, min_count: int = 1
) -> Coverage:
    """Per-step distinct-key counts for a known run; only `trusted` keys when given."""
    if min_count < 1:
        raise InputError(f"minimum coverage is {min_count}, want >= 1")
    store.check_index_current()
    run = store.run_info(run_id)
    number = store.run_number(run_id)
    where, params = "WHERE run = ? AND step >= 0", list[int | str]([number])  # init (-1) is no step
    if trusted is not None:
        where += _TRUSTED_ONLY
        params.append(_trusted_key_numbers(store, trusted))
    per_step = store.conn.execute(
        f"SELECT step, {_VERDICT_COUNTS} FROM attest_index {where} GROUP BY step ORDER BY step", params
    ).fetchall()
    keys = store.conn.execute(f"SELECT COUNT(DISTINCT key) FROM attest_index {where}", params).fetchone()[0]
    per_step_coverage = tuple(StepCoverage(*row) for row in per_step)
    initial = initial_state_coverage(store, run_id, trusted)
    return Coverage(run, trusted is not None, min_count, per_step_coverage, keys, initial)


# Distinct keys per verdict (match 0, mismatch 1, error 2), then those that checked (a match or a mismatch).
_VERDICT_COUNTS = (
    "COUNT(DISTINCT CASE WHEN verdict = 0 THEN key END), COUNT(DISTINCT CASE WHEN verdict = 1 THEN key END), "
    "COUNT(DISTINCT CASE WHEN verdict = 2 THEN key END), COUNT(DISTINCT CASE WHEN verdict IN (0, 1) THEN key END)"
)
_TRUSTED_ONLY = " AND key IN (SELECT value FROM json_each(?))"


def _trusted_key_numbers(store: AttestationStore, trusted: frozenset[bytes]) -> str:
    """The index's numbers of the `trusted` keys, as the JSON list _TRUSTED_ONLY takes."""
    rows = store.conn.execute("SELECT key, public_key FROM attest_keys").fetchall()
    return json.dumps([key for key, public in rows if public in trusted])


def initial_state_coverage(
    store: AttestationStore, run_id: bytes, trusted: frozenset[bytes] | None = None
) -> StepCoverage | None:
    """Distinct keys per verdict for the run's initial state (the init claim: state 0 as the recipe
    builds it, indexed at INIT_INDEX_STEP, apart from step 0); None when no key attested it."""
    store.check_index_current()
    where = "WHERE run = ? AND step = ?"
    params: list[int | str] = [store.run_number(run_id), INIT_INDEX_STEP]
    if trusted is not None:
        where += _TRUSTED_ONLY
        params.append(_trusted_key_numbers(store, trusted))
    row = store.conn.execute(f"SELECT COUNT(*), {_VERDICT_COUNTS} FROM attest_index {where}", params).fetchone()
    return StepCoverage(INIT_INDEX_STEP, *row[1:]) if row[0] else None


@dataclass(frozen=True)
class Evidence:
    """One stored attestation: its ledger index, signer and exact signed bytes."""

    index: int
    verifier: bytes
    verdict: str
    observed: bytes | None
    signed: bytes


@dataclass(frozen=True)
class Dispute:
    """Different keys signed different outcomes for one step; `sides` groups the evidence by outcome."""

    run_id: bytes
    step: int
    sides: tuple[tuple[Evidence, ...], ...]

    @property
    def disputed(self) -> bool:
        """Two or more keys and two or more outcomes; False for a finding no key disputes (disputes(findings=True))."""
        return len(self.sides) >= 2 and len({item.verifier for side in self.sides for item in side}) >= 2


@dataclass(frozen=True)
class KeyEquivocation:
    """One key signed different results for one step; every signed entry of it for the step is kept."""

    run_id: bytes
    step: int
    verifier: bytes
    evidence: tuple[Evidence, ...]


@dataclass(frozen=True)
class Equivocations:
    """Attestation equivocations by verifier keys and split views of tree heads."""

    keys: tuple[KeyEquivocation, ...]
    tree_heads: tuple[SplitView, ...]


def _evidence(store: AttestationStore, where: str, params: tuple[int | bytes, ...]) -> list[Evidence]:
    """Evidence rows straight from the index and the leaves: no decoding, no signature check per query.

    The index is written from the verified bytes in the same transaction as the
    leaves, and `ledger verify` re-checks both; whoever receives the evidence
    checks the signed bytes themselves (check_dispute, check_equivocation).
    """
    rows = store.conn.execute(
        "SELECT i.leaf, k.public_key, i.verdict, i.observed FROM attest_index i JOIN attest_keys k ON k.key = i.key "
        f"WHERE {where} ORDER BY i.leaf",
        params,
    ).fetchall()
    return [
        Evidence(leaf, key, VERDICTS[verdict], observed, store.ledger.entry(leaf))
        for leaf, key, verdict, observed in rows
    ]


def disputes(store: AttestationStore, run_id: bytes | None = None, findings: bool = False) -> list[Dispute]:
    """Every disputed step (of one run, or of all runs), with the signed evidence of each side; with `findings`,
    also every claim some key found a mismatch in that no key disputes (a lone auditor's finding among them).

    One pass over the index in primary-key order (no sort, no query per
    step); only the leaves of the steps returned are read.
    """
    store.check_index_current()
    where, params = "", tuple[int, ...]()
    if run_id is not None:
        where, params = "WHERE run = ?", (store.run_number(run_id),)
    run_ids = dict(store.conn.execute("SELECT run, run_id FROM attest_runs"))
    keys = dict(store.conn.execute("SELECT key, public_key FROM attest_keys"))
    rows = store.conn.execute(
        f"SELECT run, step, key, leaf, verdict, observed FROM attest_index {where} ORDER BY run, step", params
    )
    found = []
    for (run, step), step_rows in itertools.groupby(rows, key=lambda row: (row[0], row[1])):
        group = list(step_rows)
        results = [row for row in group if VERDICTS[row[4]] != "error"]  # as views.split_sql: an error is no result
        split = len({row[2] for row in results}) >= 2 and len({(row[4], row[5]) for row in results}) >= 2
        if not split and not (findings and any(VERDICTS[row[4]] == "mismatch" for row in group)):
            continue
        sides: dict[tuple[int, bytes | None], list[Evidence]] = {}
        for _, _, key, leaf, verdict, observed in sorted(group, key=lambda row: row[3]):
            item = Evidence(leaf, keys[key], VERDICTS[verdict], observed, store.ledger.entry(leaf))
            sides.setdefault((verdict, observed), []).append(item)
        found.append(Dispute(run_ids[run], step, tuple(tuple(side) for side in sides.values())))
    return found


def finding_count(store: AttestationStore, run_id: bytes) -> int:
    """How many claims of the run have a finding: disputed, or a key found a mismatch (disputes(findings=True)),
    counted in SQL without reading a leaf (a run whose every step lies costs one pass, not a leaf per step)."""
    store.check_index_current()
    split = split_sql("")
    mismatch = VERDICTS.index("mismatch")
    row = store.conn.execute(
        f"SELECT COUNT(*) FROM (SELECT step FROM attest_index WHERE run = ? GROUP BY step "
        f"HAVING {split} OR MAX(verdict = {mismatch}))",
        (store.run_number(run_id),),
    ).fetchone()
    return int(row[0])


def equivocations(store: AttestationStore) -> Equivocations:
    """Keys that signed two results for one step, and tree heads of one size with two roots."""
    store.check_index_current()
    groups = store.conn.execute(
        "SELECT i.run, r.run_id, i.step, i.key FROM attest_index i JOIN attest_runs r ON r.run = i.run "
        "GROUP BY i.run, i.step, i.key HAVING COUNT(*) > 1 ORDER BY i.run, i.step, i.key"
    ).fetchall()
    found = []
    for run, run_id, step, key in groups:
        items = _evidence(store, "i.run = ? AND i.step = ? AND i.key = ?", (run, step, key))
        results = {decode_signed(item.signed).attestation.result() for item in items}
        if len(results) > 1:
            found.append(KeyEquivocation(run_id, step, items[0].verifier, tuple(items)))
    return Equivocations(tuple(found), tuple(store.ledger.split_views()))


def check_dispute(signed_a: bytes, signed_b: bytes) -> bool:
    """True iff the two signed attestations (verified here) are a dispute: same step, other keys, other results,
    neither an error (an error is no result: the verifier could not check; views.split_sql)."""
    a, b = decode_signed(signed_a).attestation, decode_signed(signed_b).attestation
    same_step = (a.run_id, a.index_step) == (b.run_id, b.index_step)
    return (
        same_step
        and a.verifier != b.verifier
        and "error" not in (a.verdict, b.verdict)
        and (a.verdict, a.observed_output_digest) != (b.verdict, b.observed_output_digest)
    )


def check_equivocation(signed_a: bytes, signed_b: bytes) -> bool:
    """True iff the two signed attestations (verified here) are one key's two results for one step."""
    a, b = decode_signed(signed_a).attestation, decode_signed(signed_b).attestation
    return (a.run_id, a.index_step, a.verifier) == (b.run_id, b.index_step, b.verifier) and a.result() != b.result()
