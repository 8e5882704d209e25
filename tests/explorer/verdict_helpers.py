"""A ledger whose claims cover every verdict a page must colour: a lone key's mismatch (step 0), three keys
upholding against one (step 1), two keys upholding (step 2), two keys agreeing on the same mismatch (step 3),
only errors (step 4), nothing (steps 5..9)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from p2paudit.attest.record import sign_attestation
from p2paudit.attest.store import AttestationStore, origin_for
from tests.attest.attest_helpers import key, make_record

VERDICT_RUN = hashlib.sha256(b"explorer verdict run").digest()
LONE, MOSTLY, UPHELD, AGREED, ERRORS = 0, 1, 2, 3, 4


def signed(n: int, step: int, verdict: str = "match", run: bytes = VERDICT_RUN) -> bytes:
    """Test key n's signed attestation of `step` of `run` with `verdict`."""
    return sign_attestation(key(n), make_record(key(n), step=step, verdict=verdict, run=run)).encoded


def build_verdict_ledger(directory: Path) -> Path:
    path = directory / "verdicts.db"
    with AttestationStore.open(path, origin_for(key(300).public_key)) as store:
        store.register_run(VERDICT_RUN, 10, "verdicts")
        store.append_many(
            [
                signed(301, LONE, "mismatch"),
                *(signed(n, MOSTLY) for n in (301, 302, 303)),
                signed(304, MOSTLY, "mismatch"),
                signed(301, UPHELD),
                signed(302, UPHELD),
                signed(301, AGREED, "mismatch"),
                signed(302, AGREED, "mismatch"),
                signed(303, ERRORS, "error"),
            ]
        )
        store.checkpoint(key(300))
    return path
