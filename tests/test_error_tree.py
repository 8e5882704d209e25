"""One error tree: every error kernels, ledger and p2paudit raise on purpose is an exit_codes.CodedError.

The CLI maps the tree's root, with no duck typing; ledger and kernels import
nothing from p2paudit (the root lives in the leaf package exit_codes).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from exit_codes import EXIT_INTERNAL, EXIT_MISMATCH, EXIT_USAGE, CodedError

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("exit_codes", "kernels", "ledger", "p2paudit")
# Exceptions that never leave their module: control flow, caught where they are raised; and click's own.
OUTSIDE_THE_TREE = {
    "Refused": "run.remote_checkpoint: a piece the server sent is not the manifest's; caught in run.remote",
    "_RangeIgnored": "run.remote: the server ignored a Range request; caught in the same module",
    "LibraryError": "cli: the click exception a CodedError becomes, carrying its code to click",
}


def _exception_classes() -> dict[str, list[str]]:
    """Every class defined in the shipped packages -> the names of its bases (read from the source)."""
    classes: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ClassDef):
                    bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "?") for b in node.bases]
                    classes[node.name] = bases
    return classes


def test_every_error_class_is_in_the_one_tree():
    classes = _exception_classes()

    def in_tree(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name == "CodedError":
            return True
        return name in classes and name not in seen and any(in_tree(b, seen | {name}) for b in classes[name])

    def is_exception(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name.endswith(("Error", "Exception")):
            return True
        return name not in seen and any(is_exception(b, seen | {name}) for b in classes.get(name, []))

    errors = {name for name in classes if is_exception(name)}
    outside = sorted(name for name in errors if not in_tree(name) and name not in OUTSIDE_THE_TREE)
    assert outside == []
    assert {"P2PAuditError", "LedgerError", "LedgerInvariantError", "KernelInputError"} <= errors


def test_the_bases_carry_their_codes():
    from kernels import KernelInputError
    from ledger import LedgerError, LedgerInvariantError
    from p2paudit.errors import InputError, InternalError, MismatchError, NetworkError, P2PAuditError

    assert all(issubclass(c, CodedError) for c in (KernelInputError, LedgerError, LedgerInvariantError, P2PAuditError))
    assert issubclass(KernelInputError, ValueError)  # still what numpy-style callers catch
    codes = [
        KernelInputError,
        LedgerError,
        LedgerInvariantError,
        InputError,
        MismatchError,
        InternalError,
        NetworkError,
    ]
    assert [c.exit_code for c in codes] == [2, 2, 3, 2, 1, 3, 2]
    assert CodedError.exit_code == P2PAuditError.exit_code == EXIT_INTERNAL


@pytest.mark.parametrize("code", [0, 4, 130, "2", 2.0, True])
def test_an_error_cannot_carry_a_code_outside_1_to_3(code):
    with pytest.raises(TypeError, match="exit_code"):
        type("Bad", (CodedError,), {"exit_code": code})


def test_the_libraries_import_without_p2paudit():
    probe = "import sys, kernels, ledger, exit_codes; print(sorted(m for m in sys.modules if m.startswith('p2paudit')))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "make, code",
    [
        (lambda: __import__("ledger").LedgerError("ledger refused"), EXIT_USAGE),
        (lambda: __import__("ledger").LedgerInvariantError("ledger bug"), EXIT_INTERNAL),
        (lambda: __import__("kernels").KernelInputError("kernel refused"), EXIT_USAGE),
        (lambda: __import__("p2paudit.errors").errors.MismatchError("claim differs"), EXIT_MISMATCH),
    ],
)
def test_the_cli_maps_each_library_error_by_its_class(make, code, monkeypatch, tmp_path):
    from p2paudit.cli import cli

    error = make()

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr("p2paudit.identity.load_node_identity", fail)
    result = CliRunner().invoke(cli, ["id"], env={"P2PAUDIT_HOME": str(tmp_path)})
    assert result.exit_code == code, result.output
    assert result.output.strip().splitlines() == [f"Error: {error}"]


def test_an_exit_code_attribute_alone_no_longer_passes_for_a_library_error(monkeypatch, tmp_path):
    """Duck typing is gone: an unrelated exception with an exit_code is still the verifier's own failure."""
    from p2paudit.cli import cli

    class Impostor(Exception):
        exit_code = 2

    def fail(*args, **kwargs):
        raise Impostor("not ours")

    monkeypatch.setattr("p2paudit.identity.load_node_identity", fail)
    result = CliRunner().invoke(cli, ["id"], env={"P2PAUDIT_HOME": str(tmp_path)})
    assert result.exit_code == EXIT_INTERNAL and "internal error" in result.output
