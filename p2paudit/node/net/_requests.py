"""Request/response over libp2p streams with our own framing (adapter-internal).

One stream per request: the caller writes one frame, the server answers with
one frame (_framing: varint length, maximum checked before the body).
Both sides time out; each side bounds concurrent requests per peer. Every
request gets an answer: the handler's, or a refusal with its reason in the
protocol's own format (Handler.refuse) when the server is busy, the request is
oversize or malformed, the handler runs out of time, or it fails (our bug:
logged with its traceback, answered "internal error").

The caller's errors say whose fault it was: RequestFailed / RequestTimedOut
(NetworkError: unreachable, reset, too slow; back off, never ban) apart from
BadResponse (InputError: an oversize or malformed frame; the peer sent bad data).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio
from libp2p.abc import IHost, INetStream
from libp2p.custom_types import TProtocol

from p2paudit.errors import InputError, NetworkError
from p2paudit.node.net._framing import read_frame, write_frame
from p2paudit.node.net._host import NETWORK_ERRORS, parse_peer_id

logger = logging.getLogger(__name__)

RequestHandler = Callable[[str, bytes], Awaitable[bytes]]


class RequestFailed(NetworkError):
    """A request to a peer failed: unreachable, reset, or the peer is banned (nobody's proven fault)."""


class RequestTimedOut(RequestFailed):
    """A request to a peer got no answer within its time-out."""


class BadResponse(InputError):
    """A peer answered with a frame that is oversize or malformed: bad data, the peer's fault."""


@dataclass(frozen=True)
class Handler:
    protocol_id: str
    fn: RequestHandler
    max_request: int
    max_response: int
    timeout: float
    max_concurrent_per_peer: int
    # The protocol's refusal message carrying a reason (at most 200 characters).
    refuse: Callable[[str], bytes]


class Requests:
    """Serves registered protocols and sends requests, with per-peer concurrency limits."""

    def __init__(
        self,
        host: IHost,
        max_request: int,
        max_per_peer: int,
        is_banned: Callable[[str], bool],
        emit: Callable[[str, str, str], None],
    ) -> None:
        self._host = host
        self._max_request = max_request
        self._max_per_peer = max_per_peer
        self._is_banned = is_banned
        self._emit = emit
        self._in_active: dict[tuple[str, str], int] = {}
        self._out_limits: dict[str, trio.Semaphore] = {}

    def set_handler(self, handler: Handler) -> None:
        self._host.set_stream_handler(TProtocol(handler.protocol_id), functools.partial(self._serve, handler))

    def forget_peer(self, peer: str) -> None:
        """Drop the peer's outbound limiter once nothing holds it (called on disconnect)."""
        limit = self._out_limits.get(peer)
        if limit is not None and limit.value == self._max_per_peer:
            del self._out_limits[peer]

    async def _serve(self, reg: Handler, stream: INetStream) -> None:
        peer = str(stream.muxed_conn.peer_id)
        key = (reg.protocol_id, peer)
        if self._is_banned(peer) or self._in_active.get(key, 0) >= reg.max_concurrent_per_peer:
            logger.info("refusing %s from %s: banned or too many concurrent requests", reg.protocol_id, peer)
            await self._answer(reg, stream, reg.refuse("busy: too many concurrent requests; retry later"))
            return
        self._in_active[key] = self._in_active.get(key, 0) + 1
        answer: bytes | None = None
        try:
            with trio.move_on_after(reg.timeout) as scope:
                request = await read_frame(stream, reg.max_request)
                answer = await reg.fn(peer, request)
                if len(answer) > reg.max_response:
                    raise RuntimeError(f"{reg.protocol_id} answer of {len(answer)} bytes over {reg.max_response}")
            if scope.cancelled_caught:
                logger.warning("%s from %s timed out after %.1f s", reg.protocol_id, peer, reg.timeout)
                self._emit("refused", peer, f"{reg.protocol_id}: timed out after {reg.timeout} s")
                answer = reg.refuse(f"timed out after {reg.timeout} s")
        except InputError as error:  # the request is bad: say why
            logger.info("%s from %s refused: %s", reg.protocol_id, peer, error)
            self._emit("refused", peer, f"{reg.protocol_id}: {error}")
            answer = reg.refuse(str(error))
        except NETWORK_ERRORS as error:
            logger.info("%s from %s: stream failed: %s", reg.protocol_id, peer, error)
            await reset_quietly(stream)
            return
        except Exception:  # our bug, never the peer's: logged with its traceback, answered as such
            logger.exception("%s handler failed on a request from %s (our bug)", reg.protocol_id, peer)
            answer = reg.refuse("internal error in the serving node")
        finally:
            remaining = self._in_active[key] - 1
            if remaining:
                self._in_active[key] = remaining
            else:
                del self._in_active[key]
        await self._answer(reg, stream, answer)

    async def _answer(self, reg: Handler, stream: INetStream, answer: bytes) -> None:
        """Write one answer frame and close; a peer that stops reading gets a reset after a bounded wait."""
        try:
            with trio.fail_after(min(reg.timeout, 5.0)):
                await write_frame(stream, answer, max(reg.max_response, len(answer)))
        except (trio.TooSlowError, InputError, *NETWORK_ERRORS):
            await reset_quietly(stream)
            return
        await close_quietly(stream)

    async def request(self, peer: str, protocol_id: str, data: bytes, max_response: int, timeout: float) -> bytes:
        peer_id = parse_peer_id(peer)
        if self._is_banned(peer):
            raise RequestFailed(f"peer {peer} is banned")
        limit = self._out_limits.get(peer)
        if limit is None:
            limit = self._out_limits[peer] = trio.Semaphore(self._max_per_peer)
        stream = None
        async with limit:
            try:
                with trio.fail_after(timeout):
                    stream = await self._host.new_stream(peer_id, [TProtocol(protocol_id)])
                    await write_frame(stream, data, self._max_request)
                    response = await read_frame(stream, max_response)
            except trio.TooSlowError:
                await reset_quietly(stream)
                raise RequestTimedOut(f"{protocol_id} request to {peer} timed out after {timeout} s") from None
            except InputError as error:  # the answer's frame is oversize or malformed
                await reset_quietly(stream)
                raise BadResponse(f"{protocol_id} answer from {peer}: {error}") from None
            except NETWORK_ERRORS as error:
                await reset_quietly(stream)
                detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
                raise RequestFailed(f"{protocol_id} request to {peer} failed: {detail}") from None
        await close_quietly(stream)
        return response


async def reset_quietly(stream: INetStream | None) -> None:
    if stream is None:
        return
    try:
        await stream.reset()
    except NETWORK_ERRORS:
        pass


async def close_quietly(stream: INetStream | None) -> None:
    if stream is None:
        return
    try:
        await stream.close()
    except NETWORK_ERRORS:
        pass
