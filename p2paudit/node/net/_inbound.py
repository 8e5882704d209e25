"""Inbound connections that give back their slot when they close (adapter-internal).

py-libp2p 0.8.1's swarm admits at most max_connections - min_connections
(300 - 50 = 250) inbound connections at once through a capacity limiter, and
its handler for each one waits, after the upgrade, for the *whole swarm* to
stop before it returns and gives the slot back. So the 251st inbound
connection of a node's lifetime is refused, however many of the earlier ones
already closed: a stranger who connects and leaves 250 times locks everyone
new out (found by fuzzing; honest churn does it too, just more slowly), and
every handler and its connection objects stay in memory for good.

`release_inbound_slots` replaces that handler for stream transports (TCP):
the same gate check and upgrade, then it waits for *this* connection to close,
so the slot and the memory are given back with it.
"""

from __future__ import annotations

import logging
from typing import Any

from libp2p.abc import IMuxedConn
from libp2p.network.connection.raw_connection import RawConnection

logger = logging.getLogger(__name__)


def release_inbound_slots(swarm: Any) -> None:
    """Make each inbound TCP connection's handler return once that connection has closed."""
    library_handler = swarm._do_handle_inbound_connection

    async def handle(read_write_closer: Any, maddr: Any, failure_event: Any) -> None:
        if isinstance(read_write_closer, IMuxedConn):  # QUIC and the like: not ours to change
            await library_handler(read_write_closer, maddr, failure_event)
            return
        remote = swarm._build_remote_multiaddr(read_write_closer)
        if remote is not None and not await swarm.connection_gate.is_allowed(remote):
            await _close_quietly(read_write_closer)
            return
        raw_conn = RawConnection(read_write_closer, False)
        try:
            muxed = await swarm.upgrade_inbound_raw_conn(raw_conn, maddr)
        except Exception as error:  # noqa: BLE001 (a failed upgrade is the peer's or the network's: close it)
            logger.debug("inbound upgrade from %s failed: %s", maddr, error)
            await _close_quietly(raw_conn)
            return
        closed = getattr(muxed, "event_closed", None)
        if closed is None:  # a muxer without the event: the library's own barrier
            await swarm.manager.wait_finished()
        else:
            await closed.wait()

    swarm._do_handle_inbound_connection = handle


async def _close_quietly(conn: Any) -> None:
    try:
        await conn.close()
    except Exception:  # noqa: BLE001 (already closed or broken)
        pass
