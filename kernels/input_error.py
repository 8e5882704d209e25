"""KernelInputError, the one error of the kernels library (a leaf: `import kernels` loads no numpy)."""

from __future__ import annotations

from exit_codes import EXIT_USAGE, CodedError


class KernelInputError(ValueError, CodedError):
    """An input to a kernel is malformed (dtype, shape, index range, arithmetic version): exit code 2.

    A ValueError, as numpy's own shape errors are, and a CodedError, the root of
    the error tree kernels shares with ledger and p2paudit (exit_codes).
    """

    exit_code = EXIT_USAGE
