"""`p2paudit explore`: the read-only web explorer over a ledger; `p2paudit ledger check-proof`: check, offline,
an inclusion proof file the explorer (or `ledger proof --json`) gave. The daemon's `--http` uses `serve_explorer`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from p2paudit.cli import cli
from p2paudit.cli.ledger_cmds import ledger

DEFAULT_LISTEN = "127.0.0.1:8321"  # = p2paudit.explorer.server.DEFAULT_LISTEN (imported lazily there)
MAX_PROOF_BYTES = 1 << 20


def start_explorer(listen: str, ledger_path: Path, status_path: Path | None):
    """Bind the explorer's server (InputError for a bad or busy address) and say where it is, warning off loopback."""
    from p2paudit.explorer.server import is_loopback, make_server

    server = make_server(listen, ledger_path, status_path)
    if not is_loopback(server.server_address[0]):
        click.echo(
            f"warning: the explorer listens on {listen}, not on loopback: "
            "anybody who can reach that address can read this ledger and node status",
            err=True,
        )
    click.echo(f"explorer at {server.url} (ledger {ledger_path})")
    return server


def serve_explorer(listen: str | None, ledger_path: Path, status_path: Path | None):
    """`daemon --http`: serve the explorer from a background thread until the command ends; the server, or None.

    The daemon's ledger may not exist yet: each request opens it read-only,
    and answers 503 until it does.
    """
    if listen is None:
        return None
    from p2paudit.explorer.server import start_in_thread

    server = start_explorer(listen, ledger_path, status_path)
    start_in_thread(server)

    def stop() -> None:
        server.shutdown()
        server.server_close()

    click.get_current_context().call_on_close(stop)
    return server


@cli.command()
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    help="HOST:PORT to serve on. Loopback unless opened up on purpose (another address prints a warning).",
)
@click.option(
    "--ledger",
    "ledger_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Ledger file (default: $P2PAUDIT_HOME/ledger.db), opened read-only.",
)
@click.option(
    "--status",
    "status_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A daemon's status file, for the node page (peers, bans, the step being replayed).",
)
def explore(listen: str, ledger_path: Path | None, status_path: Path | None) -> None:
    """Serve read-only web pages and a JSON API (/api/v1/) over a ledger: runs, coverage, steps, disputes,
    checkpoints, inclusion proofs. Nothing is written; stop with Ctrl-C."""
    from p2paudit.attest.store import AttestationStore
    from p2paudit.identity import home_dir

    path = ledger_path if ledger_path is not None else home_dir() / "ledger.db"
    with AttestationStore.open_readonly(path):  # a missing or unreadable ledger: one line, exit 2, before binding
        pass
    server = start_explorer(listen, path, status_path)
    click.echo("read-only; Ctrl-C to stop")
    try:
        server.serve_forever()
    finally:
        server.server_close()


@ledger.command("check-proof")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--key", "key_hex", default=None, help="The log's public key (hex): the checkpoint must be signed by it.")
def check_proof_cmd(file: Path, key_hex: str | None) -> None:
    """Check an inclusion proof file offline: the entry's hash, the RFC 9162 proof, the signed checkpoint.

    Exit 0 when it holds, 1 when anything does not verify, 2 for a file that is not a proof.
    """
    from p2paudit.errors import InputError
    from p2paudit.explorer.proofs import check_proof
    from p2paudit.identity import parse_public_key_hex
    from p2paudit.regular_files import read_regular

    key = parse_public_key_hex(key_hex) if key_hex is not None else None
    try:
        data = json.loads(read_regular(file, "proof file", MAX_PROOF_BYTES))
    except (ValueError, RecursionError) as exc:
        raise InputError(f"proof file {file} is not JSON: {str(exc)[:100]}") from None
    found = check_proof(data, key)
    entry = "entry bytes hash to the leaf" if found.entry_checked else "entry bytes not included"
    signed = (
        f"signed by {found.signed_by}" if found.signed_by else "root NOT signed: compare it with a checkpoint you trust"
    )
    click.echo(
        f"ok: entry {found.index} is in the tree of size {found.size}, root {found.root.hex()} ({entry}); {signed}"
    )
