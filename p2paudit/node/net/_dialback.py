"""Dial-back: is the address we would announce reachable from the internet? (adapter-internal)

py-libp2p 0.8.1's AutoNAT v1 server "dials back" with `host.connect()`, which
returns the connection the request came on, so it told a node behind NAT that
it was public (docs/reachability.md). Ours dials on a **new** connection:

    request:  ["p2paudit/dialback", 1, multiaddr (str)]
    response: ["p2paudit/dialback", 1, code (int), multiaddr dialled (str), reason (str)]

The request names one /ip4/.../tcp/PORT address. Its IP must be the one the
request came from (no amplification: nobody can make us dial a third party),
or 0.0.0.0, meaning "the IP you see me at". The server dials it on a fresh TCP
connection from an ephemeral port, runs the Noise handshake (which proves the
peer id), closes it, and answers OK (0) or FAILED (1); REFUSED (2) carries why
it did not dial: not the requester's IP, a request over a relayed connection
(no IP to check), more than one dial-back per peer per minute, or busy. The
dialled connection never joins the swarm (no protocols, no pubsub).

OK and FAILED say only "reached" or "not reached", never why: every FAILED
answer has the same reason text and is sent at the dial's deadline (the
timeout after the dial began), whether the port was closed (a reset at once),
filtered (no answer), unroutable, or spoke something other than Noise for the
requester's peer id. Otherwise the requester could map which of its ports are
open, closed or filtered from the reason or the answer's timing. The real
cause goes to our own log at debug level.

`DialbackClient` asks with the first announced address, or with 0.0.0.0 and
the listening port; `Tally` keeps one round of answers: 2 agreeing answers
from different peers decide PUBLIC or BEHIND_NAT. A round in which only one
peer answered for `dialback_alone_after` seconds is decided by that answer
(provisionally: asking goes on, and 2 agreeing answers overrule it). Without
that, a volunteer told only its bootstrap node stayed "unknown" for good:
every other peer it reaches through the relay, and a relayed connection has
no IP to dial back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import multiaddr
import trio
from libp2p.abc import IHost, IRawConnection
from libp2p.peer.id import ID

from p2paudit.errors import InputError
from p2paudit.node.net._host import NETWORK_ERRORS, parse_peer_id
from p2paudit.node.timing.bounded_map import BoundedMap
from p2paudit.node.wire import ProtocolSpec

logger = logging.getLogger(__name__)

DIALBACK_PROTOCOL = "/p2paudit/dialback/1.0.0"
MAGIC = "p2paudit/dialback"
OK, FAILED, REFUSED = 0, 1, 2
MAX_REQUEST_BYTES = 256
MAX_RESPONSE_BYTES = 512
MAX_ADDR = 200
MAX_REASON = 200
PER_PEER_INTERVAL = 60.0
MAX_CONCURRENT = 4
WILDCARD = "0.0.0.0"
TICK = 1.0
ASK_AGAIN_AFTER = 65.0  # a server answers one request per peer per minute
MAX_REMEMBERED = 4096  # peers whose last dial-back (asked or served) is remembered, at most
# The only reasons an OK or FAILED answer carries: what was dialled, never why it failed or how fast.
REACHED = "reached"
NOT_REACHED = "not reached"
RequestFn = Callable[[str, str, bytes, int, float], Awaitable[bytes]]


@dataclass(frozen=True)
class Answer:
    """One dial-back answer: code OK, FAILED or REFUSED, the address the server dialled, and why."""

    code: int
    addr: str
    reason: str


def _pack(value: list[object]) -> bytes:
    packed: bytes = msgpack.packb(value, use_bin_type=True)  # msgpack is untyped: packb gives bytes
    return packed


def _unpack(data: bytes, limit: int, what: str) -> list[Any]:
    if len(data) > limit:
        raise InputError(f"dial-back {what} of {len(data)} bytes is over {limit}")
    try:
        value = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as error:  # msgpack raises several unrelated exception types
        raise InputError(f"dial-back {what} is not msgpack: {type(error).__name__}") from None
    if not isinstance(value, list) or len(value) < 3 or value[0] != MAGIC or value[1] != 1:
        raise InputError(f"dial-back {what} must be [{MAGIC!r}, 1, ...]")
    if _pack(value) != data:
        raise InputError(f"dial-back {what} is not canonical msgpack")
    return value


def tcp_target(addr: str) -> tuple[str, int]:
    """(ip, port) of an /ip4/A.B.C.D/tcp/PORT multiaddr; InputError for anything else."""
    try:
        parsed = multiaddr.Multiaddr(addr)
        names = [p.name for p in parsed.protocols()]
        ip, port = parsed.value_for_protocol("ip4"), int(parsed.value_for_protocol("tcp"))
    except Exception:  # multiaddr raises several unrelated exception types
        raise InputError(f"dial-back address {addr[:MAX_ADDR]!r} is not /ip4/<ip>/tcp/<port>") from None
    if names != ["ip4", "tcp"] or not 0 < port < 65536:
        raise InputError(f"dial-back address {addr[:MAX_ADDR]!r} is not /ip4/<ip>/tcp/<port> (port 1..65535)")
    return ip, port


def encode_request(addr: str) -> bytes:
    return _pack([MAGIC, 1, addr[:MAX_ADDR]])


def decode_request(data: bytes) -> str:
    value = _unpack(data, MAX_REQUEST_BYTES, "request")
    if len(value) != 3 or not isinstance(value[2], str) or len(value[2]) > MAX_ADDR:
        raise InputError(f"dial-back request must be [{MAGIC!r}, 1, address of at most {MAX_ADDR} characters]")
    tcp_target(value[2])
    return value[2]


def encode_response(code: int, addr: str, reason: str) -> bytes:
    return _pack([MAGIC, 1, code, addr[:MAX_ADDR], reason[:MAX_REASON]])


def refusal(reason: str) -> bytes:
    return encode_response(REFUSED, "", reason)


def decode_response(data: bytes) -> Answer:
    value = _unpack(data, MAX_RESPONSE_BYTES, "response")
    if len(value) != 5 or value[2] not in (OK, FAILED, REFUSED) or type(value[2]) is not int:
        raise InputError("dial-back response must be [magic, 1, code 0..2, address, reason]")
    if not (isinstance(value[3], str) and isinstance(value[4], str)):
        raise InputError("dial-back response's address and reason must be strings")
    if value[2] != REFUSED:
        tcp_target(value[3])
    return Answer(value[2], value[3], value[4])


class DialbackServer:
    """Serves DIALBACK_PROTOCOL: dials the requester back on a new connection (module docstring)."""

    def __init__(self, host: IHost, remote_ips: Callable[[ID], list[str]], timeout: float) -> None:
        self._host = host
        self._remote_ips = remote_ips  # IPs of the peer's direct connections, relayed ones left out
        self._timeout = timeout
        # peer -> when it last had a dial-back; over PER_PEER_INTERVAL later, and bounded (the oldest go).
        self._last: BoundedMap[str, None] = BoundedMap(MAX_REMEMBERED, max_age=PER_PEER_INTERVAL)
        self._slots = trio.Semaphore(MAX_CONCURRENT)

    async def serve(self, peer: str, request: bytes) -> bytes:
        claimed = decode_request(request)
        ip, port = tcp_target(claimed)
        seen = self._remote_ips(parse_peer_id(peer))
        if not seen:
            return refusal("dial-back only over a direct connection (no IP to check on a relayed one)")
        if ip == WILDCARD:
            ip = seen[0]
        elif ip not in seen:
            return refusal(f"{ip} is not the address the request came from ({seen[0]})")
        now = trio.current_time()
        if self._last.alive(peer, now):
            return refusal(f"one dial-back per peer per {PER_PEER_INTERVAL:.0f} s")
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            return refusal(f"busy: {MAX_CONCURRENT} dial-backs running")
        target = f"/ip4/{ip}/tcp/{port}"
        deadline = trio.current_time() + self._timeout
        try:
            self._last.put(peer, None, now)
            reached = await self._dial(target, parse_peer_id(peer))
        finally:
            self._slots.release()  # the wait below holds no connection: it takes no dial slot
        if reached:
            return encode_response(OK, target, REACHED)
        # A closed port answers in microseconds, a filtered one never: answering every failure at the
        # deadline leaves the requester nothing to tell them apart by.
        await trio.sleep_until(deadline)
        return encode_response(FAILED, target, NOT_REACHED)

    async def _dial(self, target: str, peer_id: ID) -> bool:
        """Whether a TCP connection and a Noise handshake proved `peer_id` at `target` within the time-out; the
        connection is closed at once and never joins the swarm. Why it failed is logged here, never answered."""
        swarm = self._host.get_network()
        addr = multiaddr.Multiaddr(target)
        began = trio.current_time()
        raw: IRawConnection | None = None
        try:
            with trio.fail_after(self._timeout):
                transport = swarm.transport_manager.transport_for_dialing(addr)  # type: ignore[attr-defined]  # Swarm's; INetworkService does not declare it
                if transport is None:
                    logger.debug("dial-back of %s: no transport here dials it", target)
                    return False
                raw = await transport.dial(addr)
                secure = await swarm.upgrader.upgrade_security(raw, True, peer_id)  # type: ignore[attr-defined]  # Swarm's; INetworkService does not declare it
                await secure.close()
        except trio.TooSlowError:
            logger.debug("dial-back of %s: no answer within %.0f s", target, self._timeout)
            return False
        except NETWORK_ERRORS as error:
            elapsed = trio.current_time() - began
            logger.debug(
                "dial-back of %s: %s after %.2f s: %s", target, type(error).__name__, elapsed, str(error)[:120]
            )
            return False
        finally:
            await _close_quietly(raw)
        logger.debug("dial-back of %s: Noise handshake done in %.3f s", target, trio.current_time() - began)
        return True


async def _close_quietly(conn: IRawConnection | None) -> None:
    if conn is None:
        return
    try:
        await conn.close()
    except Exception:  # noqa: BLE001 (already closed or broken)
        pass


def dialback_spec(dialback_timeout: float) -> ProtocolSpec:
    """The dial-back protocol for a node whose dials take at most `dialback_timeout`: the server answers
    within it plus 3 s, and the asker waits 2 s more (both ends build it from the same setting)."""
    return ProtocolSpec(
        DIALBACK_PROTOCOL,
        MAX_REQUEST_BYTES,
        MAX_RESPONSE_BYTES,
        dialback_timeout + 3.0,
        refusal,
        encode_request,
        decode_request,
        encode_response,
        decode_response,
        slack=2.0,
        max_concurrent_per_peer=1,
    )
