"""Peer exchange and Kademlia provider records: the discovery part a `Node` holds (adapter-internal).

Every connected peer is asked for its peers (/p2paudit/peers/1.0.0) and the new
ones are dialled, often while that finds peers, then less often; the answer
lists connected peers with the addresses we know for them, and for peers that
hold a reservation on our relay service their /p2p-circuit address through us.
Kademlia provider records (`provide`, `find_providers`) find peers beyond both.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import multiaddr
import trio
from libp2p.abc import IHost
from libp2p.kad_dht.kad_dht import KadDHT
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.peer.peerstore import PeerStoreError

from p2paudit.errors import InputError, NetworkError
from p2paudit.node.net._config import NodeConfig
from p2paudit.node.net._dialling import PeerKeeping
from p2paudit.node.net._host import NETWORK_ERRORS, dht_key, parse_peer_id
from p2paudit.node.net._peers import decode_peer_list, encode_peer_list, encode_peer_refusal
from p2paudit.node.net._reach import Reach
from p2paudit.node.net._requests import RequestTimedOut
from p2paudit.node.timing.backoff import Backoff, BackoffPolicy
from p2paudit.node.wire import ProtocolSpec

logger = logging.getLogger(__name__)

PEERS_PROTOCOL = "/p2paudit/peers/1.0.0"
MAX_PEER_LIST_BYTES = 64 * 1024
# One request, empty; the answer: at most max_peer_list peers of at most max_addrs_per_peer addresses each.
PEERS = ProtocolSpec(
    PEERS_PROTOCOL, 0, MAX_PEER_LIST_BYTES, 5.0, encode_peer_refusal, None, None, encode_peer_list, decode_peer_list
)


class PeerDiscovery:
    """The discovery part a Node holds: serves and asks for peer lists, and keeps provider records in the
    DHT. `ask` is the node's (Node.ask); dialling, bans and the connected set are `keeping`'s."""

    def __init__(
        self,
        host: IHost,
        config: NodeConfig,
        dht: KadDHT,
        keeping: PeerKeeping,
        reach: Reach,
        ask: Callable[[str, ProtocolSpec, bytes], Awaitable[bytes]],
    ) -> None:
        self.host, self.config, self.dht, self.keeping, self.reach, self._ask = host, config, dht, keeping, reach, ask

    async def serve_peers(self, peer: str, request: bytes) -> bytes:
        entries = []
        store = self.host.get_peerstore()
        for other in sorted(str(p) for p in self.host.get_connected_peers()):
            if other == peer or self.keeping.is_banned(other):
                continue
            try:
                known = [str(a) for a in store.addrs(parse_peer_id(other))]
            except PeerStoreError:  # connected inbound, no address stored: only what we relay for it
                known = []
            addrs = list(dict.fromkeys(self.reach.circuits_for(other) + known))[: self.config.max_addrs_per_peer]
            if addrs:
                entries.append((other, addrs))
            if len(entries) >= self.config.max_peer_list:
                break
        return encode_peer_list(entries)

    async def exchange_peers(self, peer: str) -> int:
        """Ask `peer` for its peers and dial the new ones; returns how many we connected to."""
        answer = await self._ask(peer, PEERS, b"")
        entries = decode_peer_list(answer, self.config.max_peer_list, self.config.max_addrs_per_peer)
        dialled = 0
        for other, addrs in entries:
            if other == self.keeping.peer_id or other in self.keeping.connected or self.keeping.is_banned(other):
                continue
            if len(self.keeping.connected) >= self.config.max_peers:
                break
            info = PeerInfo(parse_peer_id(other), [multiaddr.Multiaddr(a) for a in addrs])
            try:
                await self.keeping.dial(info, ttl=self.config.exchanged_addr_ttl)
                dialled += 1
            except (NetworkError, InputError) as error:  # unreachable, banned, or ourselves: a hint, not a lie
                logger.info("peer %s from %s: %s", other, peer, error)
        return dialled

    async def exchange_loop(self) -> None:
        # Ask often while it finds peers, then back off (each ask costs every peer a request). An interval
        # above the maximum stays as it is (a node that hardly asks, as in tests).
        base = self.config.peer_exchange_interval
        backoff = Backoff(BackoffPolicy(base, max(base, self.config.peer_exchange_max_interval)))
        while True:
            await trio.sleep(backoff.next_delay)
            found = 0
            for peer in list(self.keeping.connected):
                if len(self.keeping.connected) >= self.config.max_peers:
                    break
                try:
                    found += await self.exchange_peers(peer)
                except NetworkError as error:  # unreachable, too slow or declined: ask again later
                    logger.info("peer exchange with %s: %s", peer, error)
                except InputError as error:  # its answer was bad data
                    await self.keeping.penalize(peer, f"bad peer-exchange answer: {error}")
            if found:
                backoff.succeeded()
            else:
                backoff.failed(trio.current_time())

    async def add_dht_peer(self, peer_id: ID) -> None:
        # Identify must finish first: the routing table admits only peers that speak the DHT protocol.
        await trio.sleep(0.5)
        try:
            await self.dht.add_peer(peer_id)
        except NETWORK_ERRORS as error:
            logger.debug("dht add_peer %s: %s", peer_id, error)

    async def provide(self, key: bytes) -> bool:
        """Announce in the DHT that we serve `key` (e.g. a run id); True if it was stored."""
        return await self.dht.provide(dht_key(key))

    async def find_providers(self, key: bytes, count: int = 20, timeout: float = 10.0) -> list[tuple[str, list[str]]]:
        """(peer, addresses) of up to `count` providers of `key` other than us; addresses kept for a while."""
        with trio.move_on_after(timeout):
            infos = await self.dht.find_providers(dht_key(key), count)
            out: dict[str, list[str]] = {}
            for info in infos:  # the same provider comes back once per peer that stored it
                peer = str(info.peer_id)
                if peer != self.keeping.peer_id and info.addrs and peer not in out:
                    self.host.get_peerstore().add_addrs(info.peer_id, info.addrs, self.config.exchanged_addr_ttl)
                    out[peer] = [str(a) for a in info.addrs]
            return list(out.items())
        raise RequestTimedOut(f"find_providers timed out after {timeout} s")
