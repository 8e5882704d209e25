"""Signed v2 attestations made up for benchmarks: one per (key, step), a few mismatches and errors.

Shared by attest_bench.py (the store), network_bench.py (gossip), explorer_bench.py and
scripts/explorer_screenshot.py (the README's picture of the explorer), so all of them use the same records.
"""

from __future__ import annotations

import hashlib

from p2paudit.attest.record import Attestation, SignedAttestation, sign_attestation
from p2paudit.identity import Identity

LOSS_BITS = 0x4013_3333_3333_3333  # 4.8 as binary64 bits: every record claims and observes one loss


def synthetic_attestation(
    identity: Identity, run_id: bytes, step: int, n: int, *, verdict: str | None = None, subject: str = "step"
) -> SignedAttestation:
    """Attestation number `n` (step `step`, signed by `identity`): every 97th an error, every 89th a mismatch,
    unless `verdict` says which. `subject="init"`: of the initial state (step 0; no input, data or loss)."""
    if verdict is None:
        verdict = "error" if n % 97 == 0 else "mismatch" if n % 89 == 0 else "match"
    init = subject == "init"
    claimed = hashlib.sha256(b"state 0" if init else b"state %d" % (step + 1)).digest()
    observed = {"match": claimed, "error": None}.get(verdict, hashlib.sha256(b"bad %d" % n).digest())
    data = None if init else hashlib.sha256(b"data %d" % step).digest()
    ran = verdict != "error"
    loss = None if init else LOSS_BITS
    record = Attestation(
        run_id=run_id,
        subject=subject,
        step=step,
        input_digest=None if init else hashlib.sha256(b"state %d" % step).digest(),
        claimed_data_digest=data,
        observed_data_digest=data if ran else None,
        claimed_output_digest=claimed,
        observed_output_digest=observed,
        claimed_loss_bits=loss,
        observed_loss_bits=loss if ran else None,
        findings=(("init",) if init else ("state",)) if verdict == "mismatch" else (),
        verdict=verdict,
        engine_version="p2paudit 0.1.0",
        arithmetic_version=1,
        backend="cpu",
        hardware="x86_64 AMD EPYC, 2 cores",
        time_ms=1_764_000_000_000 + n,
        verifier=identity.public_key,
    )
    return sign_attestation(identity, record)
