"""Shared builders for attestation tests (deterministic keys, valid v2 records, real v1 bytes)."""

from __future__ import annotations

import hashlib

import msgpack

from p2paudit.attest.record import Attestation, SignedAttestation, decode_signed, sign_attestation
from p2paudit.attest.record_v1 import DOMAIN_V1, AttestationV1, encode_v1
from p2paudit.audit.records import loss_bits
from p2paudit.identity import Identity, identity_from_seed, sign

RUN = hashlib.sha256(b"run one").digest()
CLAIMED_LOSS = 2.5  # every step's claimed loss in these records
# What each finding changes in the observed values of a mismatch built by make_record.
_DIFFERING = ("data", "state", "loss", "init")


def key(n: int) -> Identity:
    """The n-th deterministic test identity."""
    return identity_from_seed(hashlib.sha256(b"test key %d" % n).digest())


def digest(label: str) -> bytes:
    return hashlib.sha256(label.encode()).digest()


def make_record(
    identity: Identity,
    step: int = 0,
    verdict: str = "match",
    run: bytes = RUN,
    observed: str | None = None,
    time_ms: int = 1_700_000_000_000,
    backend: str = "cpu",
    findings: tuple[str, ...] | None = None,
    subject: str = "step",
) -> Attestation:
    """A valid v2 record. A mismatch finds ("state",) unless `findings` says otherwise (("init",)
    for subject init); each of data/state/loss/init in the findings gets an observed value that
    differs from the claim (`observed` names the observed state), the others equal it."""
    init = subject == "init"
    if findings is None:
        findings = (("init",) if init else ("state",)) if verdict == "mismatch" else ()
    claimed_state = digest("state 0" if init else f"state {step + 1}")
    claimed_data, claimed_loss = (None, None) if init else (digest(f"data {step}"), loss_bits(CLAIMED_LOSS))
    seen_state, seen_data, seen_loss = claimed_state, claimed_data, claimed_loss
    if "state" in findings or "init" in findings:
        seen_state = digest(observed or f"bad {step + 1}")
    if "data" in findings:
        seen_data = digest(f"other data {step}")
    if "loss" in findings:
        seen_loss = loss_bits(CLAIMED_LOSS + 1)
    if verdict == "error":
        seen_state = seen_data = seen_loss = None
    return Attestation(
        run_id=run,
        subject=subject,
        step=step,
        input_digest=None if init else digest(f"state {step}"),
        claimed_data_digest=claimed_data,
        observed_data_digest=seen_data,
        claimed_output_digest=claimed_state,
        observed_output_digest=seen_state,
        claimed_loss_bits=claimed_loss,
        observed_loss_bits=seen_loss,
        findings=tuple(findings),
        verdict=verdict,
        engine_version="p2paudit 0.2.0",
        arithmetic_version=1,
        backend=backend,
        hardware="x86_64 test",
        time_ms=time_ms,
        verifier=identity.public_key,
    )


def make_signed(identity: Identity, **kwargs) -> SignedAttestation:
    return sign_attestation(identity, make_record(identity, **kwargs))


def make_v1(
    identity: Identity, step: int = 0, verdict: str = "match", run: bytes = RUN, time_ms: int = 1_700_000_000_000
) -> AttestationV1:
    """A version-1 record, as the v1 code built them (see vectors_v1)."""
    claimed = digest(f"state {step + 1}")
    seen = {"match": claimed, "mismatch": digest(f"bad {step + 1}"), "error": None}[verdict]
    return AttestationV1(
        run_id=run,
        step=step,
        input_digest=digest(f"state {step}"),
        data_digest=digest(f"data {step}"),
        claimed_output_digest=claimed,
        observed_output_digest=seen,
        verdict=verdict,
        engine_version="p2paudit 0.1.0",
        arithmetic_version=1,
        backend="cpu",
        hardware="x86_64 test",
        time_ms=time_ms,
        verifier=identity.public_key,
    )


def make_signed_v1(identity: Identity, **kwargs) -> SignedAttestation:
    """Signed v1 bytes made the way the v1 code made them (sign_attestation signs v2 only)."""
    body = encode_v1(make_v1(identity, **kwargs))
    encoded = msgpack.packb([1, body, sign(identity, DOMAIN_V1 + body)], use_bin_type=True)
    return decode_signed(encoded)
