"""`p2paudit explore`: the read-only web explorer over a ledger; `p2paudit ledger check-proof`: check, offline,
an inclusion proof file the explorer (or `ledger proof --json`) gave. The daemon's `--http` uses `serve_explorer`."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from p2paudit.cli import cli
from p2paudit.cli.ledger_cmds import ledger

if TYPE_CHECKING:  # the explorer is imported when it is started
    from p2paudit.explorer.server import ExplorerServer

DEFAULT_LISTEN = "127.0.0.1:8321"  # = p2paudit.explorer.server.DEFAULT_LISTEN (imported lazily there)
MAX_PROOF_BYTES = 1 << 20


MAX_SAVED_BYTES = 64 << 20


def saved_overviews_path(ledger_path: Path) -> Path:
    """Where the explorer keeps the overviews it made of this ledger file, for its next start (a cache)."""
    from p2paudit.identity import home_dir

    name = hashlib.sha256(str(ledger_path.resolve()).encode()).hexdigest()[:16]
    return home_dir() / "cache" / "explorer" / f"overviews-{name}.json"


def read_saved_overviews(path: Path) -> Any:
    """The saved overviews (JSON values), or None when there are none or they cannot be read: only a cache."""
    from p2paudit.errors import InputError
    from p2paudit.regular_files import read_regular

    if not path.exists():
        return None
    try:
        return json.loads(read_regular(path, "explorer cache file", MAX_SAVED_BYTES))
    except (InputError, OSError, ValueError, RecursionError):
        return None


def save_overviews(server: ExplorerServer, path: Path) -> None:
    """Write the server's overviews where its next start finds them (replacing the file whole; a cache: a failure
    to write it costs only the next start's speed)."""
    data = server.explorer.overviews.to_save()
    if data is None or not data["strips"]:
        return
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps(data, separators=(",", ":")))
        os.replace(temporary, path)
    except OSError:
        temporary.unlink(missing_ok=True)


def _save_once_warm(server: ExplorerServer, path: Path) -> None:
    def save() -> None:
        if server.warming is not None:
            server.warming.join()
        save_overviews(server, path)

    threading.Thread(target=save, name="explorer-save", daemon=True).start()


def start_explorer(listen: str, ledger_path: Path, status_path: Path | None) -> ExplorerServer:
    """Bind the explorer's server (InputError for a bad or busy address) and say where it is, warning off loopback.
    The overviews a previous server saved are taken back first; the new ones are saved once made."""
    from p2paudit.explorer.server import is_loopback, make_server

    saved_path = saved_overviews_path(ledger_path)
    server = make_server(listen, ledger_path, status_path, saved=read_saved_overviews(saved_path))
    _save_once_warm(server, saved_path)
    host = server.server_address[0]
    if not is_loopback(host if isinstance(host, str) else bytes(host).decode("ascii")):  # AF_INET(6): a str
        click.echo(
            f"warning: the explorer listens on {listen}, not on loopback: "
            "anybody who can reach that address can read this ledger and node status",
            err=True,
        )
    click.echo(f"explorer at {server.url} (ledger {ledger_path})")
    return server


def serve_explorer(listen: str | None, ledger_path: Path, status_path: Path | None) -> ExplorerServer | None:
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
        save_overviews(server, saved_overviews_path(ledger_path))  # the newest, for the next start

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
    checkpoints, inclusion proofs. The ledger is never written (only the explorer's cache of coverage overviews,
    under $P2PAUDIT_HOME/cache/explorer, for a fast first page at the next start); stop with Ctrl-C."""
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
        save_overviews(server, saved_overviews_path(path))  # the newest, for the next start


@ledger.command("check-proof")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--key",
    "key_hex",
    default=None,
    help="The log's public key (hex): the checkpoint must be signed by it for its origin.",
)
def check_proof_cmd(file: Path, key_hex: str | None) -> None:
    """Check an inclusion proof file offline: the entry's hash, the RFC 9162 proof, the signed checkpoint.

    The signer named is only a key whose signature verified for the checkpoint's
    origin: the key given, or the one a p2paudit.dev/ledger/<peer id> origin names.
    Exit 0 when everything the file holds verified (a file with no checkpoint: the
    root is not signed, and the output says so); 1 when anything does not verify;
    2 for a file that is not a proof, or a checkpoint whose signature could not be
    checked (another origin and no --key).
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
    proven = f"entry {found.index} is in the tree of size {found.size}, root {found.root.hex()} ({entry})"
    others = f"; {found.unchecked_signatures} other signature line(s) not checked" if found.unchecked_signatures else ""
    if found.origin is None:
        click.echo(f"ok: {proven}; root NOT signed: compare it with a checkpoint you trust")
    elif found.signer_key is None:
        click.echo(f"proven: {proven}; the checkpoint is of origin {found.origin[:200]!r}")
        raise InputError(
            "the checkpoint's signature was not checked: pass --key HEX, the public key of that log "
            "(its origin names no key)"
        )
    else:
        whose = "the key given" if found.key_given else "the key its origin names"
        click.echo(f"ok: {proven}; signed by {found.origin} (key {found.signer_key.hex()}, {whose}){others}")
