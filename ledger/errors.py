"""Errors of the ledger package (a leaf module: the ledger imports nothing from p2paudit).

Every error carries an `exit_code` so a CLI can map it without knowing the
ledger's classes: 2 for LedgerError and its subclasses (bad input, a refused
operation, an unusable or corrupt file), 3 for LedgerInvariantError (this
package or its caller broke a rule of its own: a bug, never the input's
fault). Messages are one line and carry the numbers that were wrong.
"""

from __future__ import annotations


class LedgerError(Exception):
    """Base class: a one-line message and the exit code a CLI maps it to."""

    exit_code: int = 2


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


class LedgerInvariantError(Exception):
    """An invariant of the ledger code itself broke (misuse by the calling code, a bug): exit code 3.

    Deliberately not a LedgerError, so that code which handles refused input
    (`except LedgerError`) does not mistake a bug for bad input.
    """

    exit_code: int = 3
