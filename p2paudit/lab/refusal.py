"""LabOpRefused: what the strict mode raises for an operation it will not run canonically (exit code 2).

Every refusal is one line that names the operation as torch's dispatcher
knows it ("aten.foo.default") and why, so a lab sees exactly which call of
its loop left the canonical op table.
"""

from __future__ import annotations

from p2paudit.errors import InputError

OP_TABLE_VERSION = 1


class LabOpRefused(InputError):
    """An aten operation, dtype, optimizer variant or compiled model that op table 1 does not run (exit 2)."""


def not_in_table(name: str, reason: str) -> LabOpRefused:
    """The refusal of an operation the table has no entry for."""
    return LabOpRefused(f"{name} is not in op table {OP_TABLE_VERSION} (refused: {reason})")


def refused(name: str, reason: str) -> LabOpRefused:
    """The refusal of one call of a table operation (an argument or dtype the entry does not cover)."""
    return LabOpRefused(f"{name} refused by op table {OP_TABLE_VERSION}: {reason}")
