"""Attestation records from step audits (p2paudit.audit), and the hardware description they carry.

Every audit becomes a version-2 record, whatever its verdict and findings
(docs/attestation.md): the record's rules are the audit's, so a consistent
audit always yields a signable record. One difference is bridged here: an
audit with verdict "error" may still carry observed values (a step replayed
from an input that was already wrong), but an "error" attestation asserts
nothing about the output, so they are dropped. Losses become the uint64 of
their binary64 bits.
"""

from __future__ import annotations

import platform
from pathlib import Path

from p2paudit.attest.record import Attestation
from p2paudit.audit.records import ERROR, INIT, StepAudit, loss_bits

_HARDWARE_LIMIT = 256


def _printable(text: str, limit: int) -> str:
    # The record allows printable ASCII only; anything else becomes '?'.
    return "".join(ch if " " <= ch <= "~" else "?" for ch in " ".join(text.split()))[:limit]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def describe_hardware(gpu_name: str | None = None) -> str:
    """A short description of this machine: architecture, CPU model, OS, and the GPU when one was used."""
    parts = [platform.machine(), _cpu_model(), f"{platform.system()} {platform.release()}"]
    if gpu_name:
        parts.append(gpu_name)
    return _printable(", ".join(p for p in parts if p), _HARDWARE_LIMIT)


def _bits(loss: float | None) -> int | None:
    return None if loss is None else loss_bits(loss)


def attestation_from_audit(audit: StepAudit, verifier: bytes, time_ms: int, hardware: str) -> Attestation:
    """The v2 record a verifier signs for one audit (a step, or the initial state).

    Precondition: the audit is consistent (its findings name exactly the
    pairs that differ); otherwise AttestationError says which rule it breaks.
    """
    error = audit.verdict == ERROR
    init = audit.subject == INIT
    return Attestation(
        run_id=audit.run_id,
        subject=audit.subject,
        step=audit.step,
        input_digest=None if init else audit.input_digest,
        claimed_data_digest=None if init else audit.claimed_data,
        observed_data_digest=None if init or error else audit.observed_data,
        claimed_output_digest=audit.claimed_digest,
        observed_output_digest=None if error else audit.observed_digest,
        claimed_loss_bits=None if init else _bits(audit.claimed_loss),
        observed_loss_bits=None if init or error else _bits(audit.observed_loss),
        findings=() if error else tuple(audit.findings),
        verdict=audit.verdict,
        engine_version=_printable(audit.engine_version, 64),  # the replay's own; the record refuses none
        arithmetic_version=audit.arithmetic_version,
        backend=_printable(audit.backend, 32),
        hardware=_printable(hardware, _HARDWARE_LIMIT),
        time_ms=time_ms,
        verifier=verifier,
    )
