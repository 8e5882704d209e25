"""Circuit relay v2 (adapter-internal): the stop side every node runs, the guarded relay service, and a
reservation made by hand.

py-libp2p 0.8.1's `CircuitV2Protocol` relays, but as shipped it is not safe on
the internet (docs/reachability.md, "What breaks"): it reserves for whatever
peer id a RESERVE names, keeps a reservation after its peer left, has no
per-IP or rate limit, checks a circuit's duration only when data arrives, and
keys its circuits by peer id, so two circuits of one peer closed each other's
streams. `GuardedRelay` mends each:

- a RESERVE naming another peer is refused (PERMISSION_DENIED) and takes no slot;
- new reservations: at most `reservations` in all and `reservations_per_ip` per
  IP, and per peer a bucket of `reservation_burst` refilled once every
  `reservation_interval` s; a reservation is dropped when its peer's last direct
  connection closes (`drop_reservation`, called by the node's notifee);
- circuits: at most `circuits` in all and `circuits_per_peer` per peer, counted
  at both ends; each is reset at `circuit_seconds` even when idle, and after
  `circuit_bytes` (both directions together);
- each circuit direction has its own key in the library's table.

`NodeCircuit` (every node, hop off) notes which relay carries each inbound
relayed connection: the library labels it with our own id instead.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import trio
from libp2p.abc import IHost, INetStream
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL_ID
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.resources import RelayLimits

from p2paudit.node.net._config import RelayServiceLimits
from p2paudit.node.net._framing import TokenBucket
from p2paudit.node.timing.bounded_map import BoundedMap

logger = logging.getLogger(__name__)

HOP = str(HOP_PROTOCOL_ID)
RESERVE_TIMEOUT = 10.0
MAX_RELAY_ADDRS = 4


class _QuietHopReads(logging.Filter):
    """The library logs ERROR at every reservation and refresh ("Error reading from hop stream": its handler
    waits for a second message on a stream the client closed) and at the end of every circuit (its reads
    and writes on the streams the other end closed): not errors. Dropped; anything else passes."""

    EXPECTED = (
        "Error reading from hop stream",
        "Unexpected error reading from stream",
        "Error relaying data",
        "Error sending status message: Cannot write to stream",
        "Unexpected error handling hop stream",
    )

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.EXPECTED)


logging.getLogger("libp2p.relay.circuit_v2.protocol").addFilter(_QuietHopReads())


def remote_ip(conn: Any) -> str | None:
    """The IPv4 address at the other end of a direct connection (None for a relayed one or no address)."""
    try:
        addrs = conn.get_transport_addresses()
    except Exception:  # noqa: BLE001 (a connection half torn down: no address)
        return None
    for addr in addrs or []:
        text = str(addr)
        if "/p2p-circuit" in text:
            return None
        try:
            ip4: str = addr.value_for_protocol("ip4")  # multiaddr is untyped: a protocol's value is a str
            return ip4
        except Exception:  # noqa: BLE001 (not IPv4)
            continue
    return None


def is_relayed(conn: Any) -> bool:
    """A connection through a relay: by its type when the library set one, else by a /p2p-circuit address."""
    try:
        kind = getattr(conn.get_connection_type(), "name", "UNKNOWN")
        if kind in ("RELAYED", "DIRECT"):
            return kind == "RELAYED"
        return any("/p2p-circuit" in str(a) for a in conn.get_transport_addresses() or [])
    except Exception:  # noqa: BLE001 (a connection half torn down: count it as not relayed)
        return False


class NodeCircuit(CircuitV2Protocol):
    """Circuit relay v2 as every node runs it: accepts relayed connections (stop); hop only in GuardedRelay."""

    def __init__(self, host: IHost, limits: RelayLimits | None = None, allow_hop: bool = False) -> None:
        super().__init__(host, limits=limits, allow_hop=allow_hop)
        self.inbound_relay: dict[ID, ID] = {}  # remote peer -> the relay its latest relayed connection came by

    async def handle_incoming_connection(self, stream: INetStream, remote_peer_id: bytes) -> None:
        self.inbound_relay[ID(remote_peer_id)] = stream.muxed_conn.peer_id
        await super().handle_incoming_connection(stream, remote_peer_id)

    def forget(self, peers: set[ID]) -> None:
        """Keep notes only for `peers` (those still connected)."""
        for peer in [p for p in self.inbound_relay if p not in peers]:
            del self.inbound_relay[peer]


class _Direction:
    """The key of one direction of one circuit in the library's `_active_relays` (it keyed by peer id)."""

    def __init__(self, peer: ID) -> None:
        self.peer = peer

    def __str__(self) -> str:
        return str(self.peer)


class GuardedRelay(NodeCircuit):
    """The relay service (`--relay-service`) with the limits of RelayServiceLimits (module docstring)."""

    def __init__(self, host: IHost, guard: RelayServiceLimits) -> None:
        limits = RelayLimits(
            duration=guard.circuit_seconds,
            data=guard.circuit_bytes,
            max_circuit_conns=guard.circuits_per_peer,
            max_reservations=guard.reservations,
            reservation_ttl=guard.reservation_ttl,
        )
        super().__init__(host, limits=limits, allow_hop=True)
        self.guard = guard
        # peer -> its reservation bucket; past the bound the oldest go (forgetting a bucket only forgives).
        self._buckets: BoundedMap[ID, TokenBucket] = BoundedMap(max(1, 16 * guard.reservations))
        self._ips: dict[ID, str] = {}
        self._per_peer: dict[ID, int] = {}
        self.circuits = 0
        self.refused = 0
        self.relayed_bytes = 0  # bytes copied through circuits since the start, both directions

    async def _read_stream_with_retry(self, stream: INetStream, *args: Any, **kwargs: Any) -> bytes | None:
        """The library's read of a circuit's data (its only caller is _relay_data), counted."""
        data = await super()._read_stream_with_retry(stream, *args, **kwargs)
        self.relayed_bytes += len(data or b"")
        return data

    def reserved_peers(self) -> list[ID]:
        return [p for p, r in self.resource_manager._reservations.items() if not r.is_expired()]

    def drop_reservation(self, peer: ID) -> None:
        """Its peer's last direct connection closed: the slot is free again (the library kept it for the TTL)."""
        if self.resource_manager._reservations.pop(peer, None) is not None:
            logger.info("relay: dropped the reservation of %s (disconnected)", peer)
        self._ips.pop(peer, None)

    async def _refuse(self, stream: INetStream, code: StatusCode, why: str) -> None:
        self.refused += 1
        logger.info("relay: refused %s: %s", stream.muxed_conn.peer_id, why)
        await self._send_status(stream, code, why)

    def _reservation_refusal(self, peer: ID, ip: str | None) -> str | None:
        g = self.guard
        live = self.reserved_peers()
        if ip is None:
            return "no IP to count the reservation against"
        if len(live) >= g.reservations:
            return f"relay holds {len(live)} reservations, its limit"
        same_ip = sum(1 for p in live if self._ips.get(p) == ip)
        if same_ip >= g.reservations_per_ip:
            return f"{same_ip} reservations already held from {ip}, the limit per IP"
        now = trio.current_time()
        bucket = self._buckets.get(peer)
        if bucket is None:
            bucket = TokenBucket(1.0 / g.reservation_interval, g.reservation_burst, now)
            self._buckets.put(peer, bucket, now)
        if not bucket.take(now):
            return f"more than {g.reservation_burst} new reservations within {g.reservation_interval:.0f} s"
        return None

    async def _handle_reserve(self, stream: INetStream, msg: HopMessage) -> None:
        peer = stream.muxed_conn.peer_id
        if msg.HasField("peer") and msg.peer.id and bytes(msg.peer.id) != peer.to_bytes():
            await self._refuse(stream, StatusCode.PERMISSION_DENIED, "a reservation is for the connection's own peer")
            return
        msg.ClearField("peer")  # the library then reserves for the connection's peer
        ip = remote_ip(stream.muxed_conn)
        if not self.resource_manager.has_reservation(peer):  # a refresh of a live one passes
            why = self._reservation_refusal(peer, ip)
            if why is not None:
                await self._refuse(stream, StatusCode.RESOURCE_LIMIT_EXCEEDED, why)
                return
        if ip is not None:
            self._ips[peer] = ip  # before the first await: a concurrent RESERVE from this IP counts it
        await super()._handle_reserve(stream, msg)
        if self.resource_manager.get_reservation(peer) is None:
            self._ips.pop(peer, None)

    def _circuit_refusal(self, src: ID, dst: ID) -> str | None:
        if dst in (src, self.host.get_id()):
            return "a circuit to the dialler itself or to the relay"
        if self.circuits >= self.guard.circuits:
            return f"relay carries {self.circuits} circuits, its limit"
        busiest = max(self._per_peer.get(src, 0), self._per_peer.get(dst, 0))
        if busiest >= self.guard.circuits_per_peer:
            return f"a peer of this circuit has {busiest} circuits, the limit per peer"
        return None

    async def _handle_connect(self, stream: INetStream, msg: HopMessage) -> None:
        src = stream.muxed_conn.peer_id
        if not (msg.HasField("peer") and msg.peer.id):
            await self._refuse(stream, StatusCode.MALFORMED_MESSAGE, "CONNECT names no peer")
            return
        dst = ID(bytes(msg.peer.id))
        why = self._circuit_refusal(src, dst)
        if why is not None:
            await self._refuse(stream, StatusCode.RESOURCE_LIMIT_EXCEEDED, why)
            await reset_quietly(stream)
            return
        self.circuits += 1
        for peer in (src, dst):
            self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
        try:
            await super()._handle_connect(stream, msg)
        finally:
            self.circuits -= 1
            for peer in (src, dst):
                left = self._per_peer.pop(peer) - 1
                if left:
                    self._per_peer[peer] = left
            for peer in (src, dst):  # the library's per-peer entries; each direction has its own below
                self._active_relays.pop(peer, None)

    async def _relay_data(
        self,
        src_stream: INetStream,
        dst_stream: INetStream,
        peer_id: ID,
        deadline: float | None = None,
        circuit_data_limit: list[int] | None = None,
    ) -> None:
        key = _Direction(peer_id)
        self._active_relays[key] = (src_stream, dst_stream)  # type: ignore[index]  # keyed per direction, not by ID
        # The library set `deadline` on time.monotonic(), not trio's clock: read it on the same clock.
        seconds = self.guard.circuit_seconds if deadline is None else max(0.0, deadline - time.monotonic())
        with trio.move_on_after(seconds + 1.0) as scope:
            await super()._relay_data(src_stream, dst_stream, key, deadline, circuit_data_limit)  # type: ignore[arg-type]  # (the same key)
        if scope.cancelled_caught:  # an idle circuit past its time: the library only checks when data arrives
            logger.info("relay: circuit of %s reset after %.0f s", peer_id, seconds)
            with trio.CancelScope(shield=True):
                await reset_quietly(src_stream)
                await reset_quietly(dst_stream)
        self._active_relays.pop(key, None)  # type: ignore[call-overload]  # (the same key)


async def reset_quietly(stream: INetStream | None) -> None:
    if stream is None:
        return
    try:
        await stream.reset()
    except Exception:  # noqa: BLE001 (already closed or broken)
        pass
