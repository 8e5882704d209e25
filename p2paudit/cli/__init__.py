"""The `p2paudit` command: a thin click adapter over the library.

Only this package prints or exits. Every error the library raises on
purpose, p2paudit's, ledger's and kernels' alike, derives from
`exit_codes.CodedError` (re-exported by p2paudit.errors) and carries its
`exit_code` on the class; `AuditGroup` turns each into one line on stderr and
that exit status, so click's test runner sees exactly what a user sees. Anything else
that escapes a command is the verifier's own failure: one line and exit 3
(EXIT_INTERNAL), never 1, which means "the claim did not match"; `--debug`
shows its traceback. A closed pipe on stdout (`| head -1`) ends the command
silently with 141, as SIGPIPE ends a Unix tool (Python ignores SIGPIPE, and
restoring it would let a peer's closed socket kill the daemon). Command modules import heavy libraries (torch, numba,
libp2p) inside their functions so that `--help` and `--version` stay fast.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import traceback
from typing import Any

import click

from p2paudit import __version__
from p2paudit.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_USAGE, CodedError


class LibraryError(click.ClickException):
    """A library error re-raised for click, keeping its exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self._exit_code = exit_code

    @property
    def exit_code(self) -> int:
        """This error's exit code (click's ClickException has one class-wide code; each library error has its own)."""
        return self._exit_code

    @exit_code.setter  # writeable, as the class attribute it overrides is
    def exit_code(self, code: int) -> None:
        self._exit_code = code

    def format_message(self) -> str:
        return self.message


def _one_line(text: str) -> str:
    return " ".join(str(text).split()) or "(no message)"


EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE  # 141: what a shell reports for a tool a closed pipe stopped


def _stdout_closed() -> bool:
    """Whether standard output is a pipe nobody reads any more (`p2paudit ... | head -1` after head exits)."""
    try:
        fd = sys.__stdout__.fileno() if sys.__stdout__ is not None else -1
        poller = select.poll()
    except (OSError, ValueError, AttributeError):  # no real stdout (a test runner's), or no poll on this system
        return False
    if fd < 0:
        return False
    poller.register(fd, 0)  # POLLERR and POLLHUP are always reported: the write end of a pipe with no reader
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so what is still buffered is dropped silently at exit (no 'Exception ignored')."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        if sys.__stdout__ is not None:  # there is one: _stdout_closed found it closed
            os.dup2(devnull, sys.__stdout__.fileno())
    finally:
        os.close(devnull)


class AuditGroup(click.Group):
    """A click group that maps library errors, OS errors and crashes to one-line failures."""

    def invoke(self, ctx: click.Context) -> Any:  # click's Group.invoke returns the command's result, Any
        try:
            return super().invoke(ctx)
        except (KeyboardInterrupt, click.exceptions.Abort):
            # Never 1 ("a claim did not match"): an interrupted check of an honest run concluded nothing.
            raise LibraryError("interrupted", EXIT_INTERRUPTED) from None
        except (click.exceptions.ClickException, click.exceptions.Exit):
            raise
        except BrokenPipeError as exc:
            if not _stdout_closed():  # a socket or another pipe: an OS error like any other
                raise LibraryError(_one_line(f"{exc.strerror or exc}"), EXIT_USAGE) from exc
            _quiet_stdout()
            raise SystemExit(EXIT_CLOSED_PIPE) from None
        except OSError as exc:  # full disk, permission denied, missing file
            where = f" ({exc.filename})" if exc.filename else ""
            raise LibraryError(_one_line(f"{exc.strerror or exc}{where}"), EXIT_USAGE) from exc
        except CodedError as exc:  # p2paudit's, ledger's and kernels' errors: one tree, the code on the class
            raise LibraryError(_one_line(str(exc)), type(exc).exit_code) from exc
        except Exception as exc:
            if ctx.meta.get("p2paudit.debug"):
                traceback.print_exc()
            message = (
                f"internal error (a bug in p2paudit, not a finding about the run): "
                f"{type(exc).__name__}: {_one_line(str(exc))[:300]}; rerun with --debug for the traceback"
            )
            raise LibraryError(message, EXIT_INTERNAL) from exc


@click.group(cls=AuditGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="p2paudit")
@click.option("--debug", is_flag=True, help="Print the traceback of an internal error (exit 3).")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Audit an open training run one deterministic step at a time.

    Exit codes: 0 every check matched; 1 a claim did not match; 2 bad usage or
    unreadable input; 3 the verifier itself failed (please report it);
    130 interrupted (Ctrl-C); 141 stdout's reader closed it (| head).
    """
    ctx.meta["p2paudit.debug"] = debug


# Every command module, listed: a missing one is an import error, never a silently absent command.
from p2paudit.cli import (  # noqa: E402,F401  (registers the commands)
    announce_cmd,
    daemon_cmds,
    data_cmds,
    demo_cmd,
    explore_cmd,
    identity_cmds,
    lab_cmds,
    ledger_cmds,
    ledger_log_cmds,
    node_cmds,
    run_cmds,
    train_cmd,
)


def main() -> None:
    """Console entry point."""
    sys.exit(cli.main(prog_name="p2paudit"))
