"""Read-only SQL views over a ledger file, so it opens usefully in sqlite-utils, datasette or the sqlite3 shell.

    attestations        one row per stored attestation: leaf index, run id (hex), subject ("step" or
                        "init"), step, verifier (hex), verdict (text), observed output digest
                        ("sha256:<hex>" or NULL) and the exact signed bytes
    disputes            one row per disputed claim: two or more keys and two or more outcomes
                        (verdict, observed digest), as attest.queries.disputes defines it
    findings            one row per claim with a finding: disputed (as above), or a key found a mismatch
                        and no key disputes it (a lone auditor's finding among them); `disputed` 1 or 0,
                        as attest.queries.disputes(findings=True) defines it
    coverage_per_step   per run and step with any attestation: distinct keys that checked it
                        (match or mismatch), matched, found a mismatch, reported an error
    checkpoint_heads    every signed tree head the ledger holds (its own and witnessed peers'),
                        root as hex and the signer's key name

Views are created only by a writer (`create_views`, called when the store
opens read-write), `CREATE VIEW IF NOT EXISTS`: they hold no rows, so the
append-only triggers have nothing to say about them, and a ledger written
before they existed gains them on its next write. Readers never depend on
them: the explorer queries the tables, and `create_views(conn, temp=True)`
makes the same views as TEMP views on a read-only connection.
"""

from __future__ import annotations

import sqlite3

_VERDICT = "CASE i.verdict WHEN 0 THEN 'match' WHEN 1 THEN 'mismatch' ELSE 'error' END"
_SUBJECT = "CASE WHEN i.step = -1 THEN 'init' ELSE 'step' END"
_STEP = "CASE WHEN i.step = -1 THEN 0 ELSE i.step END"


def split_sql(alias: str = "i.") -> str:
    """SQL, over one step's attest_index rows, for "disputed": two or more keys reported a result and the
    results differ (verdict or observed state). An "error" is no result: the verifier could not check (its
    own failure, docs/attestation.md), so it neither makes nor joins a dispute; otherwise any key could turn
    a lone auditor's finding into a "dispute" among honest keys by signing an error beside it."""
    v, o, k, ok = f"{alias}verdict", f"{alias}observed", f"{alias}key", f"(WHERE {alias}verdict != 2)"
    return (
        f"(COUNT(DISTINCT {k}) FILTER {ok} >= 2 AND "
        f"(MIN({v}) FILTER {ok} != MAX({v}) FILTER {ok} OR MIN({o}) FILTER {ok} != MAX({o}) FILTER {ok}))"
    )


_SPLIT = split_sql()

VIEWS: dict[str, str] = {
    "attestations": (
        f"SELECT i.leaf AS leaf, lower(hex(r.run_id)) AS run_id, {_SUBJECT} AS subject, {_STEP} AS step, "
        f"lower(hex(k.public_key)) AS verifier, {_VERDICT} AS verdict, "
        "CASE WHEN i.observed IS NULL THEN NULL ELSE 'sha256:' || lower(hex(i.observed)) END "
        "AS observed_output_digest, e.data AS signed_attestation "
        "FROM attest_index i JOIN attest_runs r ON r.run = i.run JOIN attest_keys k ON k.key = i.key "
        "JOIN entries e ON e.idx = i.leaf"
    ),
    "disputes": (
        f"SELECT lower(hex(r.run_id)) AS run_id, {_SUBJECT} AS subject, {_STEP} AS step, "
        "COUNT(DISTINCT i.key) AS keys, COUNT(*) AS attestations, MIN(i.leaf) AS first_leaf, "
        "MAX(i.leaf) AS last_leaf FROM attest_index i JOIN attest_runs r ON r.run = i.run "
        f"GROUP BY i.run, i.step HAVING {_SPLIT}"
    ),
    "findings": (
        f"SELECT lower(hex(r.run_id)) AS run_id, {_SUBJECT} AS subject, {_STEP} AS step, "
        "COUNT(DISTINCT i.key) AS keys, COUNT(*) AS attestations, "
        f"{_SPLIT} AS disputed, SUM(i.verdict = 1) AS mismatches, MIN(i.leaf) AS first_leaf, "
        "MAX(i.leaf) AS last_leaf FROM attest_index i JOIN attest_runs r ON r.run = i.run "
        f"GROUP BY i.run, i.step HAVING {_SPLIT} OR MAX(i.verdict = 1)"
    ),
    "coverage_per_step": (
        "SELECT lower(hex(r.run_id)) AS run_id, i.step AS step, "
        "COUNT(DISTINCT CASE WHEN i.verdict IN (0, 1) THEN i.key END) AS checked, "
        "COUNT(DISTINCT CASE WHEN i.verdict = 0 THEN i.key END) AS match, "
        "COUNT(DISTINCT CASE WHEN i.verdict = 1 THEN i.key END) AS mismatch, "
        "COUNT(DISTINCT CASE WHEN i.verdict = 2 THEN i.key END) AS error, COUNT(*) AS attestations "
        "FROM attest_index i JOIN attest_runs r ON r.run = i.run WHERE i.step >= 0 GROUP BY i.run, i.step"
    ),
    "checkpoint_heads": (
        "SELECT id, kind, status, origin, size, lower(hex(root)) AS root, "
        "substr(vkey, 1, instr(vkey, '+') - 1) AS signer, vkey, note, recorded_at FROM checkpoints"
    ),
}


def create_views(conn: sqlite3.Connection, temp: bool = False) -> None:
    """CREATE [TEMP] VIEW IF NOT EXISTS for every view. Precondition (not temp): inside a write transaction."""
    kind = "TEMP VIEW" if temp else "VIEW"
    for name, sql in VIEWS.items():
        conn.execute(f"CREATE {kind} IF NOT EXISTS {name} AS {sql}")


def missing_views(conn: sqlite3.Connection) -> list[str]:
    """The views of VIEWS that the file does not hold yet (written before they existed)."""
    held = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")}
    return [name for name in VIEWS if name not in held]
