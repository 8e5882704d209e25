"""Errors of the ledger package (it imports nothing from p2paudit, only the shared leaf exit_codes).

Both bases derive from exit_codes.CodedError, the root of the one error tree
that kernels, ledger and p2paudit share, so a CLI maps them without knowing
the ledger's classes: exit 2 for LedgerError and its subclasses (bad input, a
refused operation, an unusable or corrupt file), 3 for LedgerInvariantError
(this package or its caller broke a rule of its own: a bug, never the input's
fault). Messages are one line and carry the numbers that were wrong.
"""

from __future__ import annotations

from exit_codes import EXIT_INTERNAL, EXIT_USAGE, CodedError


class LedgerError(CodedError):
    """Base class of refused input and unusable files: a one-line message, exit code 2."""

    exit_code = EXIT_USAGE


class ProofError(LedgerError):
    """An inclusion or consistency proof (or a hash in it) is malformed or does not verify."""


class AppendOnlyError(LedgerError):
    """Something tried to change or remove stored data, or an entry cannot be appended."""


class CheckpointError(LedgerError):
    """A signed note or checkpoint is malformed, unsigned by a known key, or fails to verify."""


class CorruptLedgerError(LedgerError):
    """The stored data does not fit together; `index` is the first entry index that does not fit."""

    def __init__(self, message: str, index: int | None) -> None:
        super().__init__(message)
        self.index = index


class LedgerInvariantError(CodedError):
    """An invariant of the ledger code itself broke (misuse by the calling code, a bug): exit code 3.

    Deliberately not a LedgerError, so that code which handles refused input
    (`except LedgerError`) does not mistake a bug for bad input.
    """

    exit_code = EXIT_INTERNAL
