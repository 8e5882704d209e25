"""The attestation package's error (exit code 2, like every input error)."""

from __future__ import annotations

from p2paudit.errors import InputError


class AttestationError(InputError):
    """An attestation, envelope or store operation was refused; nothing was stored."""
