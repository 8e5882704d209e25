"""What the index already holds for the steps of a batch, and the conflict a new attestation makes with it.

Before a batch is stored, the store reads, for every (run, step) the batch
touches, what is held there (one query per run) and classifies each new
attestation against it: an equivocation when its key had signed another
result for the step, a dispute when another key had signed another outcome.
Both are kept as evidence, never refused; the class is what a node may want to
tell its peers (attest.store.Appended.conflict).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from p2paudit.attest.record import AnyAttestation, decode_signed
from p2paudit.attest.record_v2 import VERDICTS

EQUIVOCATION = "equivocation"
DISPUTE = "dispute"


@dataclass(frozen=True)
class Held:
    """An attestation already stored (or earlier in the batch) for a step: enough to spot a conflict."""

    leaf: int
    verifier: bytes
    verdict: str
    observed: bytes | None


def held_for_batch(
    conn: sqlite3.Connection, runs: Sequence[int], records: Sequence[AnyAttestation]
) -> dict[tuple[int, int], list[Held]]:
    """What is already stored for the (run number, index step) pairs of a batch: one query per run, not per item."""
    steps: dict[int, set[int]] = {}
    for record, run in zip(records, runs):
        steps.setdefault(run, set()).add(record.index_step)
    found: dict[tuple[int, int], list[Held]] = {}
    for run, wanted in steps.items():
        rows = conn.execute(
            "SELECT i.step, i.leaf, k.public_key, i.verdict, i.observed FROM attest_index i "
            "JOIN attest_keys k ON k.key = i.key WHERE i.run = ? AND i.step IN (SELECT value FROM json_each(?)) "
            "ORDER BY i.leaf",
            (run, json.dumps(sorted(wanted))),
        )
        for step, leaf, public_key, verdict, observed in rows:
            found.setdefault((run, step), []).append(Held(leaf, public_key, VERDICTS[verdict], observed))
    return found


def conflict_with(record: AnyAttestation, held: Sequence[Held], bytes_at: Callable[[int], bytes]) -> str | None:
    """EQUIVOCATION if the key signed another result for the step, DISPUTE if another key did, else None.

    `bytes_at(leaf)`: the signed bytes of a held leaf (stored, or earlier in the batch).
    """
    conflict = None
    for h in held:
        if h.verifier == record.verifier:
            other = decode_signed(bytes_at(h.leaf)).attestation
            if other.result() != record.result():
                return EQUIVOCATION
        elif (h.verdict, h.observed) != (record.verdict, record.observed_output_digest):
            conflict = DISPUTE
    return conflict
