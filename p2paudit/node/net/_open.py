"""Running a Node (adapter-internal): `open_node` starts the host, the library's services and the node's
loops, and hands the node over running; leaving it closes every connection while pubsub still runs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from p2paudit.identity import Identity
from p2paudit.node.net._adapter import Node
from p2paudit.node.net._config import NodeConfig, NodeEvent
from p2paudit.node.net._containment import background_contained_service, supervise
from p2paudit.node.net._dialback import dialback_spec
from p2paudit.node.net._discovery import PEERS
from p2paudit.node.net._gossip import raise_library_queues
from p2paudit.node.net._host import run_host


@asynccontextmanager
async def open_node(
    identity: Identity,
    config: NodeConfig | None = None,
    on_event: Callable[[NodeEvent], None] | None = None,
) -> AsyncIterator[Node]:
    """Start a node (listen, gossip, DHT, peer exchange, bootstrap redial); stop all of it on exit.

    on_event(NodeEvent) is called on the trio thread for connected, disconnected,
    banned, unbanned, refused, rejected, validator_errors, rate_limited, and for
    what containment caught: malformed (the peer's bytes did not decode) and
    contained (a network failure or a bug, logged; never the peer's fault).
    """
    config = NodeConfig() if config is None else config
    raise_library_queues(config.queue_size)
    node = Node(identity, config, on_event)
    node.serve(PEERS, node.discovery.serve_peers)
    node.serve(dialback_spec(config.reach.dialback_timeout), node.reach.dialback.serve)
    async with run_host(node.host, node._listen, node.report):
        async with (
            background_contained_service(node.gossip.pubsub, node.report),
            background_contained_service(node.gossip.router, node.report),
            background_contained_service(node.dht, node.report),
            node.reach.services(node.report),
        ):
            await node.gossip.pubsub.wait_until_ready()
            try:
                async with trio.open_nursery() as nursery:
                    node._nursery = nursery
                    loops = [node._maintain, node.discovery.exchange_loop, node.gossip.keep_subscriptions_known]
                    for loop in loops + node.reach.loops():
                        nursery.start_soon(supervise, loop, node.report)
                    for addr in config.bootstrap:
                        await node.add_bootstrap(addr)
                    try:
                        yield node
                    finally:
                        node._nursery = None
                        nursery.cancel_scope.cancel()
            finally:
                # Close every connection and listener while pubsub still runs: otherwise an
                # inbound gossip RPC arriving during teardown spawns into pubsub's closed
                # nursery ("Nursery is closed to new arrivals") and the whole node raises.
                # In a finally: a node left by cancellation or an error closes its sockets too
                # (its peers saw it connected, and kept its relay reservations, until then).
                with trio.move_on_after(5, shield=True):  # type: ignore[call-arg]  # trio-typing's stubs (see pyproject)
                    await node.host.get_network().close()
