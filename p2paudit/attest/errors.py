"""The attestation package's errors (exit code 2, like every input error)."""

from __future__ import annotations

from p2paudit.errors import InputError


class AttestationError(InputError):
    """An attestation, envelope or store operation was refused; the message says what, if anything, was stored."""


class RecordingStopped(AttestationError):
    """Recording a range of audits stopped part way: some attestations were stored, the message says which."""
