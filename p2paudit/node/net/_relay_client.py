"""Relay client (adapter-internal): one RESERVE on a relay that offers hop, and the grant it answers with
(the relay service, and the circuit protocol every node runs, are in _relay).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import multiaddr
import trio
from libp2p.abc import IHost, INetStream
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL_ID
from libp2p.relay.circuit_v2.protocol_buffer import StatusCode
from libp2p.relay.circuit_v2.transport import CircuitV2Transport
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg

from p2paudit.errors import NetworkError
from p2paudit.node.net._addresses import relay_in_addr
from p2paudit.node.net._relay import MAX_RELAY_ADDRS, RESERVE_TIMEOUT, reset_quietly
from p2paudit.node.net._requests import RequestFailed


@dataclass(frozen=True)
class Grant:
    """A reservation a relay gave us: when it ends (unix time), when it was given, and the relay's addresses
    (each ending in /p2p/<relay>)."""

    expires: float
    granted: float
    relay_addrs: tuple[str, ...]


class ReservationRefused(NetworkError):
    """The relay answered a RESERVE with a status other than OK (the status and the relay in the text): a
    decline, nobody's proven fault."""


async def reserve(host: IHost, relay: ID) -> Grant:
    """Send one RESERVE (no peer field: the relay reserves for this connection's peer) and read the answer."""
    stream = await host.new_stream(relay, [HOP_PROTOCOL_ID])
    try:
        with trio.fail_after(RESERVE_TIMEOUT):
            await write_delimited_msg(stream, HopMessage(type=HopMessage.RESERVE))
            answer = await read_delimited_msg(stream, HopMessage)
    finally:
        await close_or_reset(stream)
    status = int(answer.status) if answer.HasField("status") else StatusCode.OK.value
    if status != StatusCode.OK.value or not answer.HasField("reservation"):
        raise ReservationRefused(f"relay {relay} answered RESERVE with status {status}")
    addrs = []
    for raw in list(answer.reservation.addrs)[:MAX_RELAY_ADDRS]:
        try:
            addrs.append(str(multiaddr.Multiaddr(bytes(raw))))
        except Exception:  # noqa: BLE001 (an address that does not parse is skipped)
            continue
    return Grant(float(answer.reservation.expire), time.time(), tuple(addrs))


async def close_or_reset(stream: INetStream) -> None:
    try:
        await stream.close()
    except Exception:  # noqa: BLE001 (a broken stream: reset it)
        await reset_quietly(stream)


async def dial_circuit(
    transport: CircuitV2Transport, own_id: ID, peer_id: ID, addrs: list[multiaddr.Multiaddr], timeout: float
) -> None:
    """Connect to `peer_id` through the first of its /p2p-circuit addresses that works; RequestFailed if
    none does."""
    errors = []
    for addr in addrs[:4]:
        text = str(addr)
        if not text.endswith(f"/p2p/{peer_id}"):
            text = f"{text}/p2p/{peer_id}"
        relay = relay_in_addr(text)
        if relay is None or relay in (str(peer_id), str(own_id)):
            continue
        try:
            with trio.fail_after(timeout):
                await transport.dial(multiaddr.Multiaddr(text))
            return
        except trio.TooSlowError:
            errors.append(f"via {relay[:16]}..: timed out after {timeout} s")
        except Exception as error:  # noqa: BLE001 (the circuit transport raises assorted types)
            errors.append(f"via {relay[:16]}..: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
    raise RequestFailed(f"dial {peer_id} through a relay failed: {'; '.join(errors) or 'no usable address'}")
