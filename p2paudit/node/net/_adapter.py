"""The Node: a running libp2p node in our terms, holding its parts (adapter-internal; node/net's face
re-exports it).

Peers are base58 peer-id strings, addresses multiaddr strings, payloads opaque bytes. The parts, each
made with what it needs: `keeping` (_dialling: bans, dialling, bootstrap peers redialled by our own loop
with exponential back-off: the library's bootstrap forgets a peer after 3 failures, `connect()` stores
addresses for 120 s), `discovery` (_discovery: every connected peer asked for its peers, Kademlia
provider records beyond), `gossip` (_gossip), `requests` (_requests) and `reach` (_reach). A peer that
misbehaves is `penalize`d: disconnected and refused in both directions until its ban ends. Why each
library setting is what it is: those modules' docstrings and shared/notes/py-libp2p-0.8.1.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio
from libp2p.identity_utils import create_identity_from_seed
from libp2p.kad_dht.kad_dht import DHTMode, KadDHT
from libp2p.peer.id import ID

from p2paudit.errors import InternalError
from p2paudit.identity import Identity, peer_id_of, private_seed
from p2paudit.node.net._config import Ban, NodeConfig, NodeEvent, Reachability
from p2paudit.node.net._dialling import PeerKeeping
from p2paudit.node.net._discovery import PeerDiscovery
from p2paudit.node.net._gossip import Gossip, GossipHandler, GossipValidator
from p2paudit.node.net._host import (
    Notifee,
    build_host,
    parse_listen_addr,
)
from p2paudit.node.net._reach import Reach
from p2paudit.node.net._requests import (
    Handler,
    RequestFailed,
    RequestHandler,
    Requests,
)
from p2paudit.node.timing.bounded_map import BoundedMap
from p2paudit.node.wire import ProtocolSpec

logger = logging.getLogger(__name__)

# Bans in force at most: past it the oldest end early (a peer with many keys makes us remember no more).
MAX_BANS = 4096
# The loggers of the libraries behind this adapter (py-libp2p and its multiaddr): their warnings are the
# network's weather (a DHT read that failed, a protocol a peer does not speak), for the log file, not the
# terminal (cli/log_file.py). py-libp2p sets its loggers up when imported, as this module does.
LIBRARY_LOGGERS = ("libp2p", "multiaddr")


class Node:
    """A running libp2p node in our terms. Made by `open_node`; not constructed directly. It holds its parts:
    `keeping` (bans, dialling, bootstrap peers), `discovery` (peer exchange, DHT), `gossip`, `requests`,
    `reach`; what they share is handed to each when it is made."""

    def __init__(self, identity: Identity, config: NodeConfig, on_event: Callable[[NodeEvent], None] | None) -> None:
        self.config = config
        self._on_event = on_event
        key_pair = create_identity_from_seed(private_seed(identity))
        self.peer_id = peer_id_of(identity.public_key)
        if str(ID.from_pubkey(key_pair.public_key)) != self.peer_id:
            raise InternalError("libp2p peer id differs from p2paudit.identity.peer_id_of")
        bans: BoundedMap[str, str] = BoundedMap(MAX_BANS)  # peer -> reason, over when the ban ends
        self._nursery: trio.Nursery | None = None  # while open_node runs it
        self._listen = [parse_listen_addr(a) for a in config.listen]
        self.reach = Reach(config.reach, self.report)
        self.host = build_host(
            key_pair,
            self._listen,
            config.dial_timeout,
            lambda p: bans.alive(str(p), trio.current_time()),
            config.mdns,
            config.max_connections,
            config.reach.connections_per_peer,
        )
        self.gossip = Gossip(self.host, config, self.peer_id, self.report)
        self.keeping = PeerKeeping(self.host, config, self.peer_id, bans, self.gossip.pubsub, self.reach, self.report)
        self.requests = Requests(
            self.host, config.max_request, config.max_requests_per_peer, self.keeping.is_banned, self.report
        )
        # Provider records only. The per-subnet cap would admit two loopback peers at most. A short-lived node
        # (config.dht_server False: `announce`) is a client: it serves no DHT requests, so no peer's routing
        # table takes it in (py-libp2p admits only peers whose identify lists the DHT protocol).
        mode = DHTMode.SERVER if config.dht_server else DHTMode.CLIENT
        self.dht = KadDHT(self.host, mode, enable_values=False, max_peers_per_subnet=0)
        self.discovery = PeerDiscovery(self.host, config, self.dht, self.keeping, self.reach, self.ask)
        self.host.get_network().register_notifee(Notifee(self._on_connected, self._on_disconnected))
        self.reach.attach(self.host, self.requests.request, self.keeping.is_bootstrap)

    # --- the parts' faces -----------------------------------------------------

    def is_banned(self, peer: str) -> bool:
        return self.keeping.is_banned(peer)

    def bans(self) -> list[Ban]:
        """The bans in force: {"peer", "reason", "until" (unix seconds)}, soonest to end first."""
        return self.keeping.bans()

    async def penalize(self, peer: str, reason: str, seconds: float | None = None) -> None:
        """Disconnect `peer` and refuse it, both directions, for `seconds` (default config.ban_seconds)."""
        await self.keeping.penalize(peer, reason, seconds)

    async def connect(self, addr: str) -> str:
        """Dial a peer at a /p2p/ multiaddr; returns its peer id. RequestFailed if that fails."""
        return await self.keeping.connect(addr)

    async def add_bootstrap(self, addr: str) -> None:
        """Keep this peer for good: permanent address, redialled with back-off while we run."""
        if self._nursery is None:
            raise InternalError("add_bootstrap called on a node that is not running")
        await self.keeping.add_bootstrap(addr, self._nursery)

    def is_bootstrap(self, peer: str) -> bool:
        """Whether `peer` is one of ours for good (--peer, config.json): redialled while we run."""
        return self.keeping.is_bootstrap(peer)

    async def exchange_peers(self, peer: str) -> int:
        """Ask `peer` for its peers and dial the new ones; returns how many we connected to."""
        return await self.discovery.exchange_peers(peer)

    async def provide(self, key: bytes) -> bool:
        """Announce in the DHT that we serve `key` (e.g. a run id); True if it was stored."""
        return await self.discovery.provide(key)

    async def find_providers(self, key: bytes, count: int = 20, timeout: float = 10.0) -> list[tuple[str, list[str]]]:
        """(peer, addresses) of up to `count` providers of `key` other than us; addresses kept for a while."""
        return await self.discovery.find_providers(key, count, timeout)

    # --- peers, events, bans ------------------------------------------------

    def listen_addrs(self) -> list[str]:
        """The addresses actually bound, each ending in /p2p/<our peer id>."""
        return [f"{a}/p2p/{self.peer_id}" for a in self.host.get_transport_addrs()]

    def advertised_addrs(self) -> list[str]:
        """What peers are told (announced, bound if reachable, /p2p-circuit through our relays)."""
        return [str(a) for a in self.host.get_addrs()]

    def reachability(self) -> Reachability:
        """Public, behind NAT or unknown; relays in use; how each connected peer is reached."""
        return self.reach.status()

    def connected_peers(self) -> list[str]:
        return sorted(str(p) for p in self.host.get_connected_peers())

    def report(self, kind: str, peer: str, detail: str = "") -> None:
        """Tell the node's owner (on_event) what happened: a NodeEvent; a failing callback is only logged."""
        if self._on_event is None:
            return
        try:
            self._on_event(NodeEvent(kind=kind, peer=peer, detail=detail))
        except Exception:  # a display bug must not break the network
            logger.exception("node event callback failed on %s %s", kind, peer)

    def _on_connected(self, peer_id: ID) -> None:
        peer = str(peer_id)
        if self.is_banned(peer):
            # An upgrade that was already past the handshake when the ban began.
            if self._nursery is not None:
                self._nursery.start_soon(self.keeping.disconnect_quietly, peer_id)
            return
        if peer not in self.keeping.connected:
            self.keeping.connected.add(peer)
            self.report("connected", peer)
            if self._nursery is not None:
                self._nursery.start_soon(self.discovery.add_dht_peer, peer_id)

    def _on_disconnected(self, peer_id: ID) -> None:
        peer = str(peer_id)
        if peer in self.keeping.connected and not self.host.get_network().get_connections(peer_id):
            self.keeping.connected.discard(peer)
            self.requests.forget_peer(peer)
            if not self.keeping.is_bootstrap(peer):
                self._forget_departed(peer_id)
            self.report("disconnected", peer)

    def _forget_departed(self, peer_id: ID) -> None:
        """A peer that left and is not ours for good (not a bootstrap peer: the `announce` command's node, a
        volunteer that stopped, a relay, whose reservation the reach half voids on the same disconnect) is
        forgotten: out of the DHT's routing table and out of the peerstore. Otherwise py-libp2p 0.8.1's DHT
        keeps sending it every provider record we announce (its lookup falls back to every peer the
        peerstore holds while the table is small): a failed dial per run every DISCOVERY_INTERVAL, for good
        (measured after `announce` exited). Nothing of ours dials a peer that is not connected unless it is
        a bootstrap peer; one that comes back is found again (peer exchange, provider records) and re-learnt
        on connect (Noise, identify)."""
        try:
            self.dht.routing_table.remove_peer(peer_id)
            self.host.get_peerstore().clear_peerdata(peer_id)
        except Exception as error:  # noqa: BLE001 (the library's tables: a failure here must not break the network)
            logger.debug("forgetting %s: %s", peer_id, error)

    async def _maintain(self) -> None:
        last_clear = trio.current_time()
        while True:
            await trio.sleep(0.25)
            self.keeping.lift_expired_bans()
            if trio.current_time() - last_clear >= self.config.deliveries_clear_interval:
                self.gossip.clear_deliveries()
                last_clear = trio.current_time()

    # --- gossip -------------------------------------------------------------------

    def set_validator(self, topic: str, fn: GossipValidator) -> None:
        """fn(origin_peer, data) -> bool or IGNORE, sync or async, run before delivery and forwarding.

        Only True accepts; IGNORE drops the message without blaming anyone (not forwarded either). An exception counts as reject and is logged. Each
        rejection emits a NodeEvent naming the peer that forwarded the message.
        """
        self.gossip.set_validator(topic, fn)

    async def subscribe(self, topic: str, handler: GossipHandler) -> None:
        """Join `topic`; a background task drains it and calls handler(origin_peer, data) once per message.

        The handler runs on the drain task: keep it quick (hand work to a queue),
        or the subscription queue (config.queue_size) fills and the library drops.
        """
        if self._nursery is None:
            raise InternalError("subscribe called on a node that is not running")
        await self.gossip.subscribe(topic, handler, self._nursery)

    async def publish(self, topic: str, data: bytes) -> None:
        """Publish `data` on `topic`; our own handler gets it too. Identical bytes are sent once."""
        await self.gossip.publish(topic, data)

    def gossip_peers(self, topic: str) -> list[str]:
        """Peers known to be subscribed to `topic`."""
        return self.gossip.topic_peers(topic)

    @property
    def stats(self) -> dict[str, int]:
        """Gossip counters: delivered, duplicates, rejected, rate_limited, validator_errors."""
        return dict(self.gossip.stats)

    # --- request / response -------------------------------------------------------

    def set_handler(
        self,
        protocol_id: str,
        handler: RequestHandler,
        *,
        max_request: int,
        max_response: int,
        timeout: float,
        refuse: Callable[[str], bytes],
        max_concurrent_per_peer: int | None = None,
    ) -> None:
        """Serve `protocol_id`: one request frame in, `await handler(peer, request)` -> one response frame out.

        Every request is answered: a request over max_request (refused before its
        body is read), one the handler refuses (InputError), one past `timeout`,
        one over the peer's concurrency limit, and one the handler fails on (our
        bug, logged with its traceback) all get `refuse(reason)`, the protocol's
        own refusal message.
        """
        limit = self.config.max_requests_per_peer if max_concurrent_per_peer is None else max_concurrent_per_peer
        self.requests.set_handler(Handler(protocol_id, handler, max_request, max_response, timeout, limit, refuse))

    def serve(self, spec: ProtocolSpec, handler: RequestHandler) -> None:
        """Serve the protocol `spec` names with `handler`, under its limits (`set_handler`)."""
        self.set_handler(
            spec.id,
            handler,
            max_request=spec.max_request,
            max_response=spec.max_answer,
            timeout=spec.timeout,
            refuse=spec.refusal,
            max_concurrent_per_peer=spec.max_concurrent_per_peer,
        )

    async def ask(self, peer: str, spec: ProtocolSpec, data: bytes, *, max_answer: int | None = None) -> bytes:
        """One request of the protocol `spec` names, under its limits: its answer (at most `max_answer`, a
        narrower limit for an answer kind known to be smaller). Raises as `request`."""
        return await self.request(peer, spec.id, data, max_response=spec.answer_limit(max_answer), timeout=spec.wait)

    async def request(
        self, peer: str, protocol_id: str, data: bytes, *, max_response: int = 1 << 20, timeout: float = 10.0
    ) -> bytes:
        """Send one request frame to `peer`; return its response (at most max_response bytes).

        RequestTimedOut past `timeout`; RequestFailed if the peer is banned, unreachable or
        resets (NetworkError: nobody's proven fault); BadResponse (InputError) if it answers
        with a malformed or oversize frame.
        """
        try:
            return await self.requests.request(peer, protocol_id, data, max_response, timeout)
        except RequestFailed as error:
            await self.reach.drop_dead_relayed(peer, error)
            raise
