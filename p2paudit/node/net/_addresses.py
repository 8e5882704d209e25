"""Addresses and connections, for reachability (adapter-internal): what an --announce address may be,
which relay a circuit address goes through, and DCUtR's listen-port lookup on the bound addresses.

Importing this module points py-libp2p's DCUtR at `bound_tcp_ports` (the advertised addresses of a
NATed node hold no port to punch from).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import libp2p.relay.circuit_v2.dcutr as _dcutr_module
import multiaddr
from libp2p.abc import INetConn

from p2paudit.errors import InputError
from p2paudit.node.net._dialback import WILDCARD
from p2paudit.node.net._host import Notifee


def bound_tcp_ports(host: Any) -> list[tuple[int, str, int]]:
    """DCUtR's listen-port lookup, on the bound addresses (py-libp2p reads the advertised ones)."""
    found = []
    for addr in host.get_transport_addrs():
        parsed = _dcutr_module._tcp_ip_port(addr)
        if parsed is not None:
            found.append(parsed)
    return found


_dcutr_module._local_tcp_listen_addrs = bound_tcp_ports


class ConnNotifee(Notifee):
    """Connect and disconnect notifications with the connection itself (kinds need it)."""

    def __init__(self, on_connected: Callable[[INetConn], None], on_disconnected: Callable[[INetConn], None]) -> None:
        super().__init__(lambda _: None, lambda _: None)
        self._with_conn = (on_connected, on_disconnected)

    async def connected(self, network: Any, conn: INetConn) -> None:
        self._with_conn[0](conn)

    async def disconnected(self, network: Any, conn: INetConn) -> None:
        self._with_conn[1](conn)


def relay_in_addr(addr: str) -> str | None:
    """The relay's peer id in a .../p2p/<relay>/p2p-circuit/... address (None if there is none)."""
    if "/p2p-circuit" not in addr:
        return None
    try:
        relay: str = multiaddr.Multiaddr(addr.split("/p2p-circuit", 1)[0]).value_for_protocol("p2p")  # untyped lib
        return relay
    except Exception:  # noqa: BLE001 (no /p2p/ before /p2p-circuit)
        return None


def check_announce(addr: str) -> str:
    """An --announce address as we tell it (without a trailing /p2p/<id>); InputError unless it is a
    multiaddr with a TCP port and no /p2p-circuit."""
    try:
        parsed = multiaddr.Multiaddr(addr)
        int(parsed.value_for_protocol("tcp"))
    except Exception:  # multiaddr raises several unrelated exception types
        raise InputError(f"announce address {addr[:200]!r} is not a multiaddr with a TCP port") from None
    if "/p2p-circuit" in addr:
        raise InputError(f"announce address {addr[:200]!r} is a relay address: relays are found, not announced")
    return without_peer_id(str(parsed))


def without_peer_id(addr: str) -> str:
    """An announced address without a trailing /p2p/<id> (ours is appended to everything we tell)."""
    head, _, tail = addr.rpartition("/p2p/")
    return head if head and "/" not in tail and "/p2p-circuit" not in addr else addr


def is_wildcard(addr: multiaddr.Multiaddr) -> bool:
    return f"/ip4/{WILDCARD}/" in str(addr) or str(addr).startswith("/ip6/::/")
