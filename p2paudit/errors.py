"""Errors that carry the exit code the CLI maps them to (a leaf module)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2


class P2PAuditError(Exception):
    """Base class: a one-line, user-facing message and an exit code."""

    exit_code: int = EXIT_USAGE


class InputError(P2PAuditError):
    """A file, message or argument is malformed, missing or fails a check."""

    exit_code = EXIT_USAGE


class MismatchError(P2PAuditError):
    """A replayed result differs from the published one."""

    exit_code = EXIT_MISMATCH
