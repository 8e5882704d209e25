"""The exit codes, and the one exception base that carries them: the root of the error tree (a leaf).

Exit codes, as documented in the README:

    0  every check matched
    1  a claim did not match (the publisher's claim, never the verifier's fault)
    2  bad usage or unreadable input (a malformed, missing or refused file, flag or message)
    3  the verifier itself failed (a bug or a broken invariant): report it
    130  interrupted (SIGINT, Ctrl-C): nothing was concluded about the run

Every error that `kernels`, `ledger` and `p2paudit` raise on purpose derives
from CodedError and carries its `exit_code` as a class attribute, as click's
exceptions do, so a CLI maps any of them with one `except CodedError`.

Why a package of its own, below all three. DESIGN.md asks for one exception
tree with the exit code on its base class, and also for `kernels` and
`ledger` to be libraries in their own right, importable without p2paudit.
The base cannot live in `p2paudit.errors` (the libraries would import
p2paudit), nor in either library (the other would depend on it). Three bases
mapped one by one in the CLI would be three trees, and every `except` meant
for "any error we raise on purpose" would have to name all three (or, as
before, duck-type an `exit_code` attribute). A leaf that imports only the
standard library, and that nothing but the three error modules imports,
keeps both rules: one tree, and each library still stands alone.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it

# The codes an error may carry: 0 is success and 130 is the CLI's own (an interrupt, not an error).
ERROR_EXIT_CODES = frozenset({EXIT_MISMATCH, EXIT_USAGE, EXIT_INTERNAL})


class CodedError(Exception):
    """Base class of every error raised on purpose: a one-line message and the exit code a CLI maps it to.

    A subclass that sets `exit_code` to anything but 1, 2 or 3 is refused
    when it is defined (TypeError), so no error can read as success.
    """

    exit_code: int = EXIT_INTERNAL

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        code = cls.__dict__.get("exit_code", cls.exit_code)
        if type(code) is not int or code not in ERROR_EXIT_CODES:
            raise TypeError(f"{cls.__qualname__}.exit_code is {code!r}, want one of {sorted(ERROR_EXIT_CODES)}")
