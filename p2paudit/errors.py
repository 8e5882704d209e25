"""p2paudit's errors: the branch of the one error tree (exit_codes.CodedError) that this package raises.

Exit codes are defined, with their meaning, in exit_codes (below kernels,
ledger and p2paudit alike, so all three share one tree): 0 every check
matched, 1 a claim did not match, 2 bad usage or unreadable input, 3 the
verifier itself failed, 130 interrupted. They are re-exported here so that
p2paudit's modules name one place.

Every error the library raises on purpose derives from P2PAuditError (and so
from CodedError) and carries its `exit_code`, as click's exceptions do; the
CLI prints the message as one line and exits with that code. Anything else
that escapes is exit 3. The one way to exit 1 is MismatchError.

Between peers the tree tells fault apart: InputError is bad data (a peer that
sent it is provably misbehaving), NetworkError is "unreachable, too slow or
declined" (nobody's proven fault: back off, never ban), and anything that is
neither is our own bug.
"""

from __future__ import annotations

from exit_codes import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, CodedError

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_MISMATCH",
    "EXIT_OK",
    "EXIT_USAGE",
    "CodedError",
    "InputError",
    "InternalError",
    "MismatchError",
    "NetworkError",
    "P2PAuditError",
]


class P2PAuditError(CodedError):
    """Base class of p2paudit's own errors: a one-line, user-facing message and an exit code."""

    exit_code: int = EXIT_INTERNAL


class InputError(P2PAuditError):
    """A file, message or argument is malformed, missing or fails a check (exit 2)."""

    exit_code = EXIT_USAGE


class MismatchError(P2PAuditError):
    """A replayed result differs from the published claim (exit 1)."""

    exit_code = EXIT_MISMATCH


class InternalError(P2PAuditError):
    """An invariant of the verifier itself broke: its own fault, never the input's (exit 3)."""

    exit_code = EXIT_INTERNAL


class NetworkError(P2PAuditError):
    """A peer could not be reached, did not answer in time, or declined a request (exit 2).

    Not an InputError on purpose: nothing the peer sent was shown to be bad, so it is never banned for it.
    """

    exit_code = EXIT_USAGE
