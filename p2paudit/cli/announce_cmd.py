"""`p2paudit announce`: a lab tells the network where its run lives, signed with the key that signed the run."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click

from p2paudit.cli import cli

if TYPE_CHECKING:
    from p2paudit.identity import Identity
    from p2paudit.run.lab_run import LabManifest
    from p2paudit.run.manifest import Manifest

ANNOUNCE_LOG = "announce.log"  # not node.log: a daemon of the same home may be writing (and rotating) that


@cli.command()
@click.argument("url")
@click.option("--also-at", "mirrors", multiple=True, help="Another URL of the same run (repeatable, up to 3).")
@click.option(
    "--peer",
    "peers",
    multiple=True,
    help='A node to announce through, /ip4/.../tcp/.../p2p/<id> (repeatable); config.json\'s "peers" are added.',
)
@click.option(
    "--wait",
    type=click.FloatRange(min=1.0, max=600.0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for a peer on the announcements topic.",
)
def announce(url: str, mirrors: tuple[str, ...], peers: tuple[str, ...], wait: float) -> None:
    """Announce the run at URL (http or https) to the network, so volunteers who follow this key audit it.

    The run's manifest (an engine run's or a lab run's) is fetched and checked
    first: only the key that signed it (this node's key) can announce it. A short-lived node joins through
    --peer and publishes the signed announcement on /p2paudit/runs/v1.
    """
    import tempfile
    from pathlib import Path

    import trio

    from p2paudit.cli.audit_io import node_identity
    from p2paudit.cli.log_file import open_log_file
    from p2paudit.errors import InputError
    from p2paudit.identity import CONFIG_FILE_NAME, home_dir, load_config
    from p2paudit.node.net import LIBRARY_LOGGERS
    from p2paudit.node.protocols.announce import sign_announcement
    from p2paudit.run.cache import BlobCache
    from p2paudit.run.remote import RemoteRun

    identity = node_identity()
    home = home_dir()
    configured = load_config(home / CONFIG_FILE_NAME) if (home / CONFIG_FILE_NAME).exists() else None
    peers = tuple(dict.fromkeys((*peers, *(configured.peers if configured else ()))))
    if not peers:
        raise click.UsageError("give a node to announce through (--peer) or list peers in config.json")
    with tempfile.TemporaryDirectory() as tmp, RemoteRun(url, BlobCache(Path(tmp), 1 << 20)) as remote:
        manifest: Manifest | LabManifest
        if remote.signed_as_lab():  # a lab run (train-script's): its own manifest format
            from p2paudit.run.remote_lab import RemoteLabRun

            manifest = RemoteLabRun(remote).manifest
        else:
            manifest = remote.manifest
    if manifest.public_key != identity.public_key:
        raise InputError(
            f"the run at {url[:200]} is signed by key {manifest.public_key.hex()}, not this node's key "
            f"{identity.public_key.hex()}: only its publisher can announce it"
        )
    data = sign_announcement(identity, manifest.run_id, [url, *mirrors], time.time_ns() // 1_000_000)
    open_log_file(home, ANNOUNCE_LOG, LIBRARY_LOGGERS)  # py-libp2p's noise: there, never on the terminal
    reached = trio.run(_publish, identity, peers, data, wait)
    click.echo(f"announced run sha256:{manifest.run_id.hex()} at {url} to {reached} peer(s)")


async def _publish(identity: Identity, peers: tuple[str, ...], data: bytes, wait: float) -> int:
    """Join through `peers`, publish `data` on the runs topic once a peer is there; how many were."""
    import trio

    from p2paudit.errors import NetworkError
    from p2paudit.node.net import NodeConfig, open_node
    from p2paudit.node.protocols.announce import RUNS_TOPIC

    # A node for seconds: a DHT client (no peer's routing table takes in a node about to leave), no peer exchange.
    config = NodeConfig(bootstrap=peers, peer_exchange_interval=3600.0, dht_server=False)
    async with open_node(identity, config) as node:
        await node.subscribe(RUNS_TOPIC, lambda origin, message: None)
        with trio.move_on_after(wait):
            while not node.gossip_peers(RUNS_TOPIC):
                await trio.sleep(0.1)
        reached = len(node.gossip_peers(RUNS_TOPIC))
        if not reached:
            raise NetworkError(f"no peer joined {RUNS_TOPIC} within {wait:.0f} s; nothing was announced")
        await trio.sleep(1.5)  # a heartbeat: the peer is in our mesh, so the message goes out at once
        await node.publish(RUNS_TOPIC, data)
        await trio.sleep(2.0)  # let the outbound queue drain before the node closes
        return reached
