"""Signed v2 attestations made up for benchmarks: one per (key, step), a few mismatches and errors.

Shared by attest_bench.py (the store) and network_bench.py (gossip), so both measure the same records.
"""

from __future__ import annotations

import hashlib

from p2paudit.attest.record import Attestation, SignedAttestation, sign_attestation
from p2paudit.identity import Identity

LOSS_BITS = 0x4013_3333_3333_3333  # 4.8 as binary64 bits: every record claims and observes one loss


def synthetic_attestation(identity: Identity, run_id: bytes, step: int, n: int) -> SignedAttestation:
    """Attestation number `n` (step `step`, signed by `identity`): every 97th an error, every 89th a mismatch."""
    claimed = hashlib.sha256(b"state %d" % (step + 1)).digest()
    verdict = "error" if n % 97 == 0 else "mismatch" if n % 89 == 0 else "match"
    observed = {"match": claimed, "error": None}.get(verdict, hashlib.sha256(b"bad %d" % n).digest())
    data = hashlib.sha256(b"data %d" % step).digest()
    ran = verdict != "error"
    record = Attestation(
        run_id=run_id,
        subject="step",
        step=step,
        input_digest=hashlib.sha256(b"state %d" % step).digest(),
        claimed_data_digest=data,
        observed_data_digest=data if ran else None,
        claimed_output_digest=claimed,
        observed_output_digest=observed,
        claimed_loss_bits=LOSS_BITS,
        observed_loss_bits=LOSS_BITS if ran else None,
        findings=("state",) if verdict == "mismatch" else (),
        verdict=verdict,
        engine_version="p2paudit 0.1.0",
        arithmetic_version=1,
        backend="cpu",
        hardware="x86_64 AMD EPYC, 2 cores",
        time_ms=1_764_000_000_000 + n,
        verifier=identity.public_key,
    )
    return sign_attestation(identity, record)
