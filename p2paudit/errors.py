"""Errors that carry the exit code the CLI maps them to (a leaf module).

Exit codes, as documented in the README:

    0  every check matched
    1  a claim did not match (the publisher's claim, never the verifier's fault)
    2  bad usage or unreadable input (a malformed, missing or refused file, flag or message)
    3  the verifier itself failed (a bug or a broken invariant): report it
    130  interrupted (SIGINT, Ctrl-C): nothing was concluded about the run

Every error the library raises on purpose derives from P2PAuditError and
carries its `exit_code`, as click's exceptions do; the CLI prints the message
as one line and exits with that code. Anything else that escapes is exit 3.
The one way to exit 1 is MismatchError.

Between peers the tree tells fault apart: InputError is bad data (a peer that
sent it is provably misbehaving), NetworkError is "unreachable, too slow or
declined" (nobody's proven fault: back off, never ban), and anything that is
neither is our own bug.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it


class P2PAuditError(Exception):
    """Base class: a one-line, user-facing message and an exit code."""

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
