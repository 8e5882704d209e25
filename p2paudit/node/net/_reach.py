"""Reachability (adapter-internal): announced addresses, dial-back, relays, circuits and hole punching.

The design and the measurements behind it are docs/reachability.md; the rest of p2paudit.node sees only
`Reachability` (public, behind-nat, unknown; per peer direct, relayed, hole-punched). A `Reach` is one Node's:

- **Addresses** peers are told (`told`, which replaces the host's `get_addrs`,
  so identify, peer exchange and relay answers carry them): the `--announce`
  ones, else the bound ones (never a wildcard, and none once dial-backs say
  they reach nobody), the address a dial-back proved when public, and
  `<relay>/p2p/<relay>/p2p-circuit` for each reservation held. Not through
  `new_host(addrs_factory=...)`: py-libp2p's `get_addrs` cuts every address at
  its first /p2p/, which turns a circuit address into the relay's own. A
  change is pushed to every peer (identify push).
- **Dial-back** (_dialback, _dialback_client): peers with a direct connection dial us back; 2 agreeing
  answers decide (a lone answer, provisionally, after `dialback_alone_after`).
- **Relay client**: a node that is not public (one failed dial-back is enough,
  or `reserve_after_unknown` s undecided with no inbound direct connection)
  keeps reservations on up to `max_relays` connected peers that offer hop
  (bootstrap peers first), refreshes them at 3/4 of their time, drops one whose
  relay connection closed and reserves again, with back-off per relay.
- **Circuits**: `dial_circuit` dials /p2p-circuit addresses through the circuit transport (the swarm
  drops them); `drop_dead_relayed` closes a relayed link whose request failed (a relay's cap can leave a
  dead one listed).
- **Hole punching**: DCUtR on every node, its listen ports read from the bound addresses (_addresses).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager

import multiaddr
import trio
from libp2p.abc import IHost, INetConn
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol
from libp2p.relay.circuit_v2.transport import CircuitV2Transport

from p2paudit.node.net._addresses import ConnNotifee, check_announce, is_wildcard, relay_in_addr
from p2paudit.node.net._config import (
    BEHIND_NAT,
    DIRECT,
    HOLE_PUNCHED,
    PUBLIC,
    RELAYED,
    UNKNOWN,
    PeerLink,
    Reachability,
    ReachConfig,
    RelayServiceState,
)
from p2paudit.node.net._containment import FaultReport, background_contained_service
from p2paudit.node.net._dialback import DialbackServer, RequestFn
from p2paudit.node.net._dialback_client import DialbackClient, Tally
from p2paudit.node.net._host import NETWORK_ERRORS
from p2paudit.node.net._relay import HOP, GuardedRelay, NodeCircuit, is_relayed, remote_ip
from p2paudit.node.net._relay_client import Grant, dial_circuit, reserve
from p2paudit.node.net._requests import RequestFailed, RequestTimedOut
from p2paudit.node.timing.backoff import BackoffPolicy, Backoffs

logger = logging.getLogger(__name__)

Emit = Callable[[str, str, str], None]
TICK = 1.0
RELAY_RETRY_MIN = 30.0
RELAY_RETRY_MAX = 600.0
RELAY_RETRY = BackoffPolicy(RELAY_RETRY_MIN, RELAY_RETRY_MAX)
MAX_RELAY_RETRIES = 1024  # relays backed off from, remembered at most (the oldest forgotten: tried again)


class Reach:
    """One node's reachability machinery (module docstring); `attach` it to the host, then run `services`
    and `loops` inside the node."""

    def __init__(self, config: ReachConfig, emit: Emit) -> None:
        self.config = config
        self._emit = emit
        self._announce = tuple(check_announce(a) for a in config.announce)
        self.tally = Tally(trio.current_time())
        self.grants: dict[ID, Grant] = {}
        self._relay_retry: Backoffs[ID] = Backoffs(RELAY_RETRY, MAX_RELAY_RETRIES)
        self._hole_punched: set[ID] = set()
        self._pushed: tuple[str, ...] = ()
        self._started = trio.current_time()
        self.host: IHost | None = None

    def attach(self, host: IHost, request: RequestFn, is_bootstrap: Callable[[str], bool]) -> None:
        self.host, self._host = host, host  # host: None until here; _host for what runs only after attach
        self._is_bootstrap = is_bootstrap
        if self.config.relay_service:
            self.circuit: NodeCircuit = GuardedRelay(host, self.config.relay_limits)
        else:
            self.circuit = NodeCircuit(host)
        self.transport = CircuitV2Transport(host, self.circuit, RelayConfig(roles=RelayRole.STOP))
        dial_timeout = self.config.hole_punch_dial_timeout
        self.dcutr = DCUtRProtocol(host, dial_timeout=dial_timeout) if self.config.hole_punch else None
        self.dialback = DialbackServer(host, self.remote_ips, self.config.dialback_timeout)
        self.prober = DialbackClient(
            host, self.config, self._announce, self.tally, request, self.remote_ips, self._emit
        )
        host.get_network().register_notifee(ConnNotifee(self._on_connected, self._on_disconnected))
        host.get_addrs = self.told  # type: ignore[method-assign]  # replaced on purpose (module docstring)

    @asynccontextmanager
    async def services(self, report: FaultReport) -> AsyncIterator[None]:
        """Circuit relay (stop, and hop for a relay service) and DCUtR, each contained, for the node's life."""
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(background_contained_service(self.circuit, report))
            if self.dcutr is not None:
                await stack.enter_async_context(background_contained_service(self.dcutr, report))
            yield

    def loops(self) -> list[Callable[[], Awaitable[None]]]:
        return [self.prober.run, self._relay_loop, self._addrs_loop]

    # --- connections -------------------------------------------------------------------------------

    def _conns(self, peer: ID) -> list[INetConn]:
        return list(self.host.get_network().connections.get(peer, [])) if self.host is not None else []

    def remote_ips(self, peer: ID) -> list[str]:
        """IPs of the peer's direct connections (a relayed one has none to check)."""
        return [ip for ip in (remote_ip(c) for c in self._conns(peer)) if ip is not None]

    def _on_connected(self, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id
        if not is_relayed(conn) and any(is_relayed(c) for c in self._conns(peer) if c is not conn):
            self._hole_punched.add(peer)
            logger.info("direct connection to %s beside the relayed one (hole punch)", peer)
            self._emit("hole-punched", str(peer), "")

    def _on_disconnected(self, conn: INetConn) -> None:
        peer = conn.muxed_conn.peer_id
        left = self._conns(peer)
        if not left:
            self._hole_punched.discard(peer)
        if not any(not is_relayed(c) for c in left):
            if isinstance(self.circuit, GuardedRelay):
                self.circuit.drop_reservation(peer)
            if self.grants.pop(peer, None) is not None:
                logger.info("relay %s: connection closed, its reservation is void", peer)
                self._emit("relay", str(peer), "connection lost; reserving again")

    def _has_inbound_direct(self) -> bool:
        for conns in self._host.get_network().connections.values():
            for conn in conns:
                if getattr(conn.direction, "name", "") == "INBOUND" and not is_relayed(conn):  # type: ignore[attr-defined]  # SwarmConn's
                    return True
        return False

    # --- addresses ---------------------------------------------------------------------------------

    def told(self) -> list[multiaddr.Multiaddr]:
        """What peers are told, each ending in /p2p/<our id> (the module docstring says which)."""
        out = list(self._announce)
        if not out and not self.tally.leaning_nat:
            bound = self._host.get_transport_addrs()
            out += [str(a) for a in bound if not is_wildcard(a) and "/p2p-circuit" not in str(a)]
            if self.tally.state == PUBLIC and self.tally.confirmed:
                out.append(self.tally.confirmed)
        for relay, grant in list(self.grants.items()):
            out += [f"{a}/p2p-circuit" for a in self._relay_addrs(relay, grant)]
        me = f"/p2p/{self._host.get_id()}"
        return [multiaddr.Multiaddr(a + me) for a in dict.fromkeys(out)]

    def circuits_for(self, peer: str) -> list[str]:
        """/p2p-circuit addresses through us for a peer holding a reservation on our relay service."""
        if not isinstance(self.circuit, GuardedRelay) or self.host is None:
            return []
        if ID.from_base58(peer) not in self.circuit.reserved_peers():
            return []
        ours = [str(a) for a in self.host.get_addrs() if "/p2p-circuit" not in str(a)]
        return [f"{a}/p2p-circuit" for a in ours[:2]]

    def _relay_addrs(self, relay: ID, grant: Grant) -> list[str]:
        if grant.relay_addrs:
            return list(grant.relay_addrs)
        conns = [c for c in self._conns(relay) if not is_relayed(c)]
        return [f"{a}/p2p/{relay}" for c in conns[:1] for a in c.get_transport_addresses()[:2]]

    async def _addrs_loop(self) -> None:
        while True:
            await trio.sleep(TICK)
            connected = set(self._host.get_network().connections)
            self.circuit.forget(connected)
            self._hole_punched &= connected
            current = tuple(str(a) for a in self._host.get_addrs())
            if current != self._pushed:
                logger.info("advertising %s", ", ".join(current) or "no address")
                self._pushed = current
                if connected:
                    try:
                        await self._host._push_identify_to_all_peers()  # type: ignore[attr-defined]  # BasicHost's, not IHost's
                    except NETWORK_ERRORS as error:  # best effort: identify at the next connection tells them
                        logger.info("identify push failed: %s", error)

    # --- relay client ------------------------------------------------------------------------------

    def _should_reserve(self) -> bool:
        if self.config.max_relays <= 0 or self.tally.state == PUBLIC:
            return False
        if self.tally.state == BEHIND_NAT or self.tally.any_failed:
            return True
        waited = trio.current_time() - self._started >= self.config.reserve_after_unknown
        return waited and not self._has_inbound_direct()

    def _relay_candidates(self) -> list[ID]:
        store, found, now = self._host.get_peerstore(), [], trio.current_time()
        for peer_id in self._host.get_network().connections:
            if peer_id in self.grants or not self.remote_ips(peer_id):
                continue
            try:
                offers_hop = HOP in store.get_protocols(peer_id)
            except Exception:  # noqa: BLE001 (identify not done yet: not a candidate for now)
                offers_hop = False
            if offers_hop and self._relay_retry.ready(peer_id, now):
                found.append(peer_id)
        return sorted(found, key=lambda p: (not self._is_bootstrap(str(p)), str(p)))

    async def _relay_loop(self) -> None:
        while True:
            await trio.sleep(TICK)
            if not self._should_reserve():
                if self.grants:
                    logger.info("public now: leaving %d relay reservation(s)", len(self.grants))
                    self.grants.clear()
                continue
            now = time.time()
            for relay, grant in list(self.grants.items()):
                if now >= grant.granted + 0.75 * (grant.expires - grant.granted):
                    await self._reserve_on(relay)
            for relay in self._relay_candidates():
                if len(self.grants) >= self.config.max_relays:
                    break
                await self._reserve_on(relay)

    async def _reserve_on(self, relay: ID) -> None:
        try:
            grant = await reserve(self._host, relay)
        except Exception as error:  # noqa: BLE001 (refused, unreachable or a bad answer: back off)
            delay = self._relay_retry.failed(relay, trio.current_time())
            if self.grants.pop(relay, None) is not None:
                self._emit("relay", str(relay), "reservation lost")
            logger.info("relay %s: no reservation (%s: %s); retry in %.0f s", relay, type(error).__name__, error, delay)
            return
        self._relay_retry.succeeded(relay)
        fresh = relay not in self.grants
        self.grants[relay] = grant
        if fresh:
            logger.info("relay %s: reserved until %.0f", relay, grant.expires)
            self._emit("relay", str(relay), f"reserved for {grant.expires - grant.granted:.0f} s")

    # --- circuits ----------------------------------------------------------------------------------

    async def dial_circuit(self, peer_id: ID, addrs: list[multiaddr.Multiaddr], timeout: float) -> None:
        """Connect to `peer_id` through the first of its /p2p-circuit addresses that works (RequestFailed)."""
        await dial_circuit(self.transport, self._host.get_id(), peer_id, addrs, timeout)

    async def drop_dead_relayed(self, peer: str, error: RequestFailed) -> None:
        """A request to `peer` failed: if it is reached only through relays, close those connections."""
        if isinstance(error, RequestTimedOut) or self.host is None:
            return
        conns = self._conns(ID.from_base58(peer))
        if conns and all(is_relayed(c) for c in conns):
            logger.info("closing the relayed connection(s) of %s after a failed request", peer)
            for conn in conns:
                try:
                    await conn.close()
                except NETWORK_ERRORS:
                    pass

    # --- status ------------------------------------------------------------------------------------

    def _link(self, peer: ID, conns: list[INetConn]) -> PeerLink:
        if any(not is_relayed(c) for c in conns):
            punched = peer in self._hole_punched or (self.dcutr is not None and peer in self.dcutr._direct_connections)
            return PeerLink(str(peer), HOLE_PUNCHED if punched else DIRECT)
        relay = None
        for conn in conns:
            relay = relay_in_addr(str((conn.get_transport_addresses() or [""])[0]))
            if relay == str(self._host.get_id()):  # an inbound one is labelled with our own id
                noted = self.circuit.inbound_relay.get(peer)
                relay = str(noted) if noted is not None else None
        return PeerLink(str(peer), RELAYED, relay)

    def status(self) -> Reachability:
        if self.host is None:
            return Reachability(UNKNOWN, (), (), (), (), (), None)
        links = tuple(self._link(p, list(c)) for p, c in sorted(self.host.get_network().connections.items(), key=str))
        reservations = tuple(sorted(str(r) for r in self.grants))
        relays = tuple(sorted(set(reservations) | {link.relay for link in links if link.relay}))
        service = None
        if isinstance(self.circuit, GuardedRelay):
            c = self.circuit
            service = RelayServiceState(len(c.reserved_peers()), c.circuits, c.refused, c.relayed_bytes)
        addresses = tuple(str(a) for a in self.host.get_addrs())
        return Reachability(self.tally.state, addresses, relays, reservations, links, self.tally.lines(), service)
