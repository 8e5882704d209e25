"""Bans and dialling: the peer-keeping part a `Node` holds (adapter-internal).

A peer that misbehaves is `penalize`d: disconnected, its addresses dropped, its
gossip refused, and refused both ways until its ban ends (`_lift_expired_bans`,
from the node's maintenance loop, gives a bootstrap peer its address back).
Dialling goes direct first and through /p2p-circuit addresses after; bootstrap
peers are kept with a permanent address and redialled by our own loop with
exponential back-off (the library's bootstrap forgets a peer after 3 failures;
`connect()` stores addresses for 120 s).
"""

from __future__ import annotations

import functools
import logging
import time

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.peer.peerstore import PERMANENT_ADDR_TTL

from p2paudit.errors import NetworkError
from p2paudit.node.net._config import Ban, NodeConfig
from p2paudit.node.net._containment import FaultReport, supervise
from p2paudit.node.net._host import NETWORK_ERRORS, parse_peer_addr, parse_peer_id
from p2paudit.node.net._pubsub import GuardedPubsub
from p2paudit.node.net._reach import Reach
from p2paudit.node.net._requests import RequestFailed, RequestTimedOut
from p2paudit.node.timing.backoff import Backoff, BackoffPolicy
from p2paudit.node.timing.bounded_map import BoundedMap

logger = logging.getLogger(__name__)


class PeerKeeping:
    """The peers a Node keeps and refuses: its bans (peer -> reason, each over when its ban ends), the peers
    connected now, the bootstrap peers redialled for good (on `redial`, a back-off policy), and dialling.
    Times are trio's clock."""

    def __init__(
        self,
        host: IHost,
        config: NodeConfig,
        peer_id: str,
        bans: BoundedMap[str, str],
        pubsub: GuardedPubsub,
        reach: Reach,
        emit: FaultReport,
    ) -> None:
        self.host, self.config, self.peer_id, self.reach = host, config, peer_id, reach
        self._bans, self._pubsub, self._emit = bans, pubsub, emit
        self.redial = BackoffPolicy(config.redial_min, config.redial_max)  # bad values: InputError, here
        self.connected: set[str] = set()
        self.bootstrap: dict[str, PeerInfo] = {}

    # --- bans -------------------------------------------------------------------

    def is_banned(self, peer: str) -> bool:
        return self._bans.alive(peer, trio.current_time())

    def bans(self) -> list[Ban]:
        """The bans in force: {"peer", "reason", "until" (unix seconds)}, soonest to end first."""
        now, wall = trio.current_time(), time.time()
        current = sorted((self._bans.until(peer) or now, peer, reason) for peer, reason in self._bans.items(now))
        return [Ban(peer=p, reason=reason, until=wall + u - now) for u, p, reason in current]

    async def disconnect_quietly(self, peer_id: ID) -> None:
        try:
            await self.host.disconnect(peer_id)
        except NETWORK_ERRORS as error:
            logger.debug("disconnect %s: %s", peer_id, error)

    async def penalize(self, peer: str, reason: str, seconds: float | None = None) -> None:
        """Disconnect `peer` and refuse it, both directions, for `seconds` (default config.ban_seconds)."""
        peer_id = parse_peer_id(peer)
        duration = self.config.ban_seconds if seconds is None else seconds
        now = trio.current_time()
        # Past the bound the oldest bans end early, lifted like any other (a flood of keys buys nothing more).
        for dropped, _ in self._bans.put(peer, reason[:200], now, until=now + duration):
            self._lift_ban(dropped)
        logger.warning("banning %s for %.0f s: %s", peer, duration, reason[:200])
        self._pubsub.add_to_blacklist(peer_id)
        # Without addresses nothing (our loops, the swarm's auto-connector) dials it.
        self.host.get_peerstore().clear_addrs(peer_id)
        self._emit("banned", peer, reason)
        await self.disconnect_quietly(peer_id)

    def lift_expired_bans(self) -> None:
        for peer, _ in self._bans.expire(trio.current_time()):
            self._lift_ban(peer)

    def _lift_ban(self, peer: str) -> None:
        peer_id = parse_peer_id(peer)
        self._pubsub.remove_from_blacklist(peer_id)
        info = self.bootstrap.get(peer)
        if info is not None:
            self.host.get_peerstore().add_addrs(peer_id, info.addrs, PERMANENT_ADDR_TTL)
        self._emit("unbanned", peer, "")

    # --- dialling -------------------------------------------------------------

    async def connect(self, addr: str) -> str:
        """Dial a peer at a /p2p/ multiaddr; returns its peer id. RequestFailed if that fails."""
        info = parse_peer_addr(addr)
        await self.dial(info)
        return str(info.peer_id)

    async def dial(self, info: PeerInfo, ttl: int = PERMANENT_ADDR_TTL) -> None:
        peer = str(info.peer_id)
        if self.is_banned(peer):
            raise RequestFailed(f"peer {peer} is banned")
        if peer == self.peer_id:
            raise RequestFailed("refusing to dial ourselves")
        # The swarm drops /p2p-circuit addresses: those go through the circuit transport, if direct ones fail.
        circuits = [a for a in info.addrs if "/p2p-circuit" in str(a)]
        direct = PeerInfo(info.peer_id, [a for a in info.addrs if "/p2p-circuit" not in str(a)])
        reached = False
        try:
            if direct.addrs or not circuits:
                try:
                    await self._dial_direct(direct)
                    reached = True
                    return
                except RequestFailed:
                    if not circuits:
                        raise
            await self.reach.dial_circuit(info.peer_id, circuits, 2 * self.config.dial_timeout)
            reached = True
        finally:
            if reached or self.is_bootstrap(peer) or peer in self.connected:
                # connect() stored the addresses with a 120 s TTL; keep them as long as asked.
                self.host.get_peerstore().add_addrs(info.peer_id, info.addrs, ttl)
            else:
                self._forget_unreached(info.peer_id)

    def _forget_unreached(self, peer_id: ID) -> None:
        """A peer we could not reach and do not keep (a hint from peer exchange, a provider that left) out of
        the peerstore, where connect() left its addresses: py-libp2p 0.8.1's DHT falls back to every peer
        the peerstore holds while its table is small, and would send it every provider record we announce,
        a failed dial a round for as long as the addresses lasted (seen in tests/node/test_daemon_terminal.py:
        a departed `announce` node named by a peer that had not yet seen it leave)."""
        try:
            self.host.get_peerstore().clear_peerdata(peer_id)
        except Exception as error:  # noqa: BLE001 (the library's table: a failure here must not break the dial's caller)
            logger.debug("forgetting %s: %s", peer_id, error)

    async def _dial_direct(self, info: PeerInfo) -> None:
        peer = str(info.peer_id)
        # After one failure the swarm refuses to redial a peer for 60 s; our loops do the back-off.
        self.host.get_network().unblock_peer(info.peer_id)  # type: ignore[attr-defined]  # Swarm's; INetworkService does not declare it
        try:
            with trio.fail_after(self.config.dial_timeout):
                await self.host.connect(info)
        except trio.TooSlowError:
            raise RequestTimedOut(f"dial {peer} timed out after {self.config.dial_timeout} s") from None
        except NETWORK_ERRORS as error:
            raise RequestFailed(f"dial {peer} failed: {str(error).splitlines()[0][:200]}") from None

    def is_bootstrap(self, peer: str) -> bool:
        """Whether `peer` is one of ours for good (--peer, config.json): redialled while we run."""
        return peer in self.bootstrap

    async def add_bootstrap(self, addr: str, nursery: trio.Nursery) -> None:
        """Keep this peer for good: permanent address, redialled with back-off in `nursery` (the node's)."""
        info = parse_peer_addr(addr)
        peer = str(info.peer_id)
        if peer == self.peer_id or peer in self.bootstrap:
            return
        self.bootstrap[peer] = info
        self.host.get_peerstore().add_addrs(info.peer_id, info.addrs, PERMANENT_ADDR_TTL)
        nursery.start_soon(supervise, functools.partial(self._keep_bootstrap, info), self._emit)

    async def _keep_bootstrap(self, info: PeerInfo) -> None:
        backoff = Backoff(self.redial)
        peer = str(info.peer_id)
        while True:
            if peer in self.connected or self.is_banned(peer):
                backoff.succeeded()
                await trio.sleep(self.config.redial_min)
                continue
            try:
                await self.dial(info)
                backoff.succeeded()
            except NetworkError as error:
                delay = backoff.failed(trio.current_time())
                logger.info("bootstrap %s: %s; retry in %.1f s", peer, error, delay)
                await trio.sleep(delay)
