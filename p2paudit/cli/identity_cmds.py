"""`p2paudit init` and `p2paudit id`: create and show the node's identity."""

from __future__ import annotations

import json
from pathlib import Path

import click

from p2paudit.cli import cli
from p2paudit.defaults import DEFAULT_REDUNDANCY


@cli.command()
@click.option("--name", default=None, help="Node name (default: the host name).")
@click.option(
    "--redundancy",
    type=click.IntRange(min=1),
    default=DEFAULT_REDUNDANCY,
    show_default=True,
    help="How many volunteers should replay each step.",
)
def init(name: str | None, redundancy: int) -> None:
    """Create the node key and config under $P2PAUDIT_HOME (default ~/.p2paudit).

    Refuses to overwrite an existing key or config.
    """
    from p2paudit.errors import InputError
    from p2paudit.identity import (
        CONFIG_FILE_NAME,
        default_config,
        generate_identity,
        home_dir,
        peer_id_of,
        save_config,
        save_identity,
    )

    config = default_config(name, redundancy)
    config_path = home_dir() / CONFIG_FILE_NAME
    # Check both before writing either, so a refused init leaves nothing half-made.
    for path, what in ((config.key, "key file"), (config_path, "config file")):
        if Path(path).exists():
            raise InputError(f"{what} {path} already exists; refusing to overwrite it")
    identity = generate_identity()
    save_identity(identity, config.key)
    save_config(config, config_path)
    click.echo(f"created key {config.key} (mode 0600) and config {config_path}")
    click.echo(f"public key {identity.public_key.hex()}")
    click.echo(f"peer id    {peer_id_of(identity.public_key)}")


@cli.command("id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def show_id(as_json: bool) -> None:
    """Print the node's public key (hex) and libp2p peer id."""
    from p2paudit.identity import load_node_identity, peer_id_of

    identity = load_node_identity()
    peer = peer_id_of(identity.public_key)
    if as_json:
        click.echo(json.dumps({"public_key": identity.public_key.hex(), "peer_id": peer}))
    else:
        click.echo(f"public key {identity.public_key.hex()}")
        click.echo(f"peer id    {peer}")
