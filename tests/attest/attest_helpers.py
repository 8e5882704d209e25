"""Shared builders for attestation tests (deterministic keys, valid records)."""

from __future__ import annotations

import hashlib

from p2paudit.attest.record import Attestation, SignedAttestation, sign_attestation
from p2paudit.identity import Identity, identity_from_seed

RUN = hashlib.sha256(b"run one").digest()


def key(n: int) -> Identity:
    """The n-th deterministic test identity."""
    return identity_from_seed(hashlib.sha256(b"test key %d" % n).digest())


def digest(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def make_record(identity: Identity, step: int = 0, verdict: str = "match", run: bytes = RUN,
                observed: str | None = None, time_ms: int = 1_700_000_000_000, backend: str = "cpu") -> Attestation:
    """A valid record; `observed` names the observed state for a mismatch."""
    claimed = digest(f"state {step + 1}")
    seen = {"match": claimed, "mismatch": digest(observed or f"bad {step + 1}"), "error": None}[verdict]
    return Attestation(run_id=run, step=step, input_digest=digest(f"state {step}"), data_digest=digest(f"data {step}"),
                       claimed_output_digest=claimed, observed_output_digest=seen, verdict=verdict,
                       engine_version="p2paudit 0.1.0", arithmetic_version=1, backend=backend,
                       hardware="x86_64 test", time_ms=time_ms, verifier=identity.public_key)


def make_signed(identity: Identity, **kwargs) -> SignedAttestation:
    return sign_attestation(identity, make_record(identity, **kwargs))
