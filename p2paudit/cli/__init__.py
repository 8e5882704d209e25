"""The `p2paudit` command: a thin click adapter over the library.

Only this package prints or exits. Library errors carry an `exit_code`
attribute; `AuditGroup` turns each into one line on stderr and that exit
status, so click's test runner sees exactly what a user sees. Command modules
import heavy libraries (torch, numba, libp2p) inside their functions so that
`--help` and `--version` stay fast.
"""

from __future__ import annotations

import importlib
import sys

import click

from p2paudit import __version__

COMMAND_MODULES = ("identity_cmds", "ledger_cmds", "run_cmds", "node_cmds")


class LibraryError(click.ClickException):
    """A library error re-raised for click, keeping its exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def format_message(self) -> str:
        return self.message


class AuditGroup(click.Group):
    """A click group that maps library errors and OS errors to one-line failures."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except OSError as exc:  # full disk, permission denied, missing file
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            raise LibraryError(f"{exc.strerror or exc}{where}", 2) from exc
        except Exception as exc:
            code = getattr(exc, "exit_code", None)
            if not isinstance(code, int):
                raise
            raise LibraryError(str(exc), code) from exc


@click.group(cls=AuditGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="p2paudit")
def cli() -> None:
    """Audit an open training run one deterministic step at a time."""


def _register_commands() -> None:
    for name in COMMAND_MODULES:
        try:
            importlib.import_module(f"p2paudit.cli.{name}")
        except ModuleNotFoundError as exc:
            # A command module not written yet is simply absent; a missing
            # dependency inside one is a real error.
            if exc.name != f"p2paudit.cli.{name}":
                raise


_register_commands()


def main() -> None:
    """Console entry point."""
    sys.exit(cli.main(prog_name="p2paudit"))
