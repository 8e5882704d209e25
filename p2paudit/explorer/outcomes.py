"""The shapes of a claim's outcomes as the API answers them: who signed which result (steps, runs, diagnosis)."""

from __future__ import annotations

from typing import TypedDict


class Signer(TypedDict):
    """One attestation of an outcome: its key (hex) and its ledger index."""

    verifier: str
    index: int


class Outcome(TypedDict):
    """One result of a claim (verdict and observed state digest, "sha256:<hex>" or None) and everyone who signed it."""

    verdict: str
    observed_output_digest: str | None
    signers: list[Signer]
