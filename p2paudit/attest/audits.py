"""Attestation records from step audits (p2paudit.audit), and the hardware description they carry.

The one rule that differs between the two: an audit with verdict "error" may
carry an observed digest (a step replayed from an input that was already
wrong); an attestation with verdict "error" never does, because it asserts
nothing about the output. That digest is dropped here.
"""

from __future__ import annotations

import platform
from pathlib import Path

from p2paudit.attest.record import Attestation
from p2paudit.audit.records import ERROR, StepAudit
from p2paudit.engine import ENGINE_VERSION

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


def attestation_from_audit(audit: StepAudit, verifier: bytes, time_ms: int, hardware: str) -> Attestation:
    """The record a verifier signs for one audited step (validated on construction)."""
    observed = None if audit.verdict == ERROR else audit.observed_digest
    return Attestation(
        run_id=audit.run_id, step=audit.step, input_digest=audit.input_digest, data_digest=audit.data_digest,
        claimed_output_digest=audit.claimed_digest, observed_output_digest=observed, verdict=audit.verdict,
        engine_version=_printable(audit.engine_version or ENGINE_VERSION, 64) or ENGINE_VERSION,
        arithmetic_version=audit.arithmetic_version, backend=_printable(audit.backend, 32),
        hardware=_printable(hardware, _HARDWARE_LIMIT), time_ms=time_ms, verifier=verifier,
    )
