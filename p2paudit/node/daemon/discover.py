"""Discovery of other auditors of the same runs: each run id provided in the DHT, its other providers
dialled (peer exchange covers the peers of peers)."""

from __future__ import annotations

import trio

from p2paudit.errors import InputError, NetworkError
from p2paudit.node.daemon.sources import RunSource
from p2paudit.node.daemon.state import Reporter
from p2paudit.node.net import Node

DISCOVERY_INTERVAL = 10.0


async def discover_loop(node: Node, sources: list[RunSource], report: Reporter) -> None:
    """Provide each run id in the DHT and dial the other providers: auditors of the same run find each
    other beyond their bootstrap lists (peer exchange covers the peers of peers)."""
    while True:
        for source in list(sources):
            run_id = source.manifest.run_id
            try:
                await node.provide(run_id)
                providers = await node.find_providers(run_id, timeout=5.0)
            except NetworkError as exc:
                report("peer", f"DHT lookup of run {run_id.hex()[:12]}.. failed: {exc}")
                continue
            connected = set(node.connected_peers())
            for peer, addrs in providers:
                if peer in connected or node.is_banned(peer):
                    continue
                for addr in addrs:
                    try:
                        await node.connect(f"{addr}/p2p/{peer}" if "/p2p/" not in addr else addr)
                        report("peer", f"found {peer[:16]}.. as a provider of run {run_id.hex()[:12]}..")
                        break
                    except (NetworkError, InputError):  # unreachable or a bad address: try the next
                        continue
        await trio.sleep(DISCOVERY_INTERVAL)
