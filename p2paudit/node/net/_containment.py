"""Containment: nothing a peer sends ends the node (adapter-internal).

py-libp2p 0.8.1 runs each service (swarm, pubsub, router, DHT) under a
TrioManager that cancels the *whole service* when any of its tasks raises,
and each inbound stream's handler inside its connection's nursery, so one
exception the library did not expect (protobuf's DecodeError on six bytes of
/meshsub/1.1.0, measured) takes the host down. Two walls here:

- `contain_streams`: every inbound stream, from protocol negotiation to the
  end of its handler, runs inside a wrapper that logs and reports an
  exception with the peer and the protocol, resets that stream, and returns.
- `ContainedTrioManager` (via `background_contained_service`): the
  per-connection, per-stream and per-message tasks a service spawns are
  contained the same way; only its long-lived daemon tasks keep the
  library's fail-whole-service rule (a peer's input never ends one of those
  in 0.8.1: they read queues and timers, not peer bytes).

`supervise` runs a long-lived loop of ours: an exception is logged with its
traceback and reported, and the loop starts again after a back-off that
doubles while it keeps failing (1 s to 60 s).

`classify` decides who is at fault: bytes that do not decode are the peer's
(banned), a network failure is nobody's (no ban), anything else is a bug in
the library or in us (logged with its traceback, never the peer's fault).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio
from google.protobuf.message import DecodeError
from libp2p.abc import IHost, INetStream
from libp2p.tools.anyio_service.api import ServiceAPI
from libp2p.tools.anyio_service.trio_manager import TrioManager
from libp2p.utils.connection_shutdown import is_expected_connection_shutdown

from p2paudit.errors import InputError
from p2paudit.node.timing.backoff import Backoff, BackoffPolicy

logger = logging.getLogger(__name__)

# (kind, peer, detail): kind is "malformed" (the peer sent bytes that do not decode: ban) or
# "contained" (a network failure or a bug, logged here: never the peer's fault).
FaultReport = Callable[[str, str, str], None]

MALFORMED = "malformed"
CONTAINED = "contained"
# Exceptions that mean the peer's bytes were not a valid message of the protocol.
_MALFORMED_TYPES: tuple[type[BaseException], ...] = (DecodeError, InputError, UnicodeDecodeError)


def classify(error: BaseException) -> str:
    """MALFORMED when the peer's bytes are provably not a message, else CONTAINED (network or our bug)."""
    if isinstance(error, BaseExceptionGroup):
        kinds = {classify(inner) for inner in error.exceptions}
        return MALFORMED if kinds == {MALFORMED} else CONTAINED
    if isinstance(error, _MALFORMED_TYPES):
        return MALFORMED
    return CONTAINED


def _peer_of(stream: INetStream) -> str:
    try:
        return str(stream.muxed_conn.peer_id)
    except Exception:  # noqa: BLE001 (a half-built stream: name nobody rather than fail the report)
        return "?"


def _protocol_of(stream: INetStream) -> str:
    try:
        return str(stream.get_protocol() or "(negotiating)")
    except Exception:  # noqa: BLE001 (as above)
        return "(negotiating)"


def report_fault(report: FaultReport, error: BaseException, peer: str, where: str) -> None:
    """Log `error` by who is at fault and tell `report`; a bug gets its traceback in the log."""
    kind = classify(error)
    detail = f"{where}: {type(error).__name__}: {' '.join(str(error).split())[:200]}"
    if kind == MALFORMED:
        logger.warning("malformed input from %s on %s", peer, detail)
    elif is_expected_connection_shutdown(error):
        logger.debug("connection of %s ended in %s", peer, detail)
        return
    else:
        logger.error("contained an error from %s in %s", peer, where, exc_info=error)
    try:
        report(kind, peer, detail)
    except Exception:  # noqa: BLE001 (a reporting bug must not undo the containment)
        logger.exception("fault report failed for %s", peer)


def contain_streams(host: IHost, report: FaultReport) -> None:
    """Run every inbound stream (negotiation and handler) inside a wrapper that cannot raise."""
    network = host.get_network()
    inner = network.common_stream_handler  # type: ignore[attr-defined]  # Swarm's; INetworkService does not declare it

    async def contained(stream: INetStream) -> None:
        try:
            await inner(stream)
        except Exception as error:  # noqa: BLE001 (the wall: classified, logged and reported)
            report_fault(report, error, _peer_of(stream), f"stream {_protocol_of(stream)}")
            try:
                await stream.reset()
            except Exception:  # noqa: BLE001 (already broken: nothing more to do)
                pass

    network.set_stream_handler(contained)


def _contained_task(
    async_fn: Callable[..., Awaitable[Any]], service: str, report: FaultReport
) -> Callable[..., Awaitable[None]]:
    @functools.wraps(async_fn)
    async def run(*args: Any) -> None:
        try:
            await async_fn(*args)
        except Exception as error:  # noqa: BLE001 (the wall: classified, logged and reported)
            peer = next((str(a) for a in args if type(a).__name__ == "ID"), "?")
            report_fault(report, error, peer, f"{service} task {getattr(async_fn, '__name__', async_fn)}")

    return run


class ContainedTrioManager(TrioManager):
    """A TrioManager whose non-daemon tasks cannot cancel the service: their exceptions are reported."""

    def __init__(self, service: ServiceAPI, report: FaultReport) -> None:
        super().__init__(service)
        self._report = report

    def run_task(self, async_fn: Any, *args: Any, daemon: bool = False, name: str | None = None, **kw: Any) -> None:
        if not daemon:
            label = name or getattr(async_fn, "__qualname__", str(async_fn))
            async_fn = _contained_task(async_fn, type(self._service).__name__, self._report)
            name = label
        super().run_task(async_fn, *args, daemon=daemon, name=name, **kw)


@asynccontextmanager
async def background_contained_service(service: ServiceAPI, report: FaultReport) -> AsyncIterator[TrioManager]:
    """py-libp2p's background_trio_service with a ContainedTrioManager."""
    async with trio.open_nursery() as nursery:
        manager = ContainedTrioManager(service, report)
        service._manager = manager
        nursery.start_soon(manager.run)
        await manager.wait_started()
        try:
            yield manager
        finally:
            await manager.stop()


SUPERVISE_MIN_DELAY = 1.0
SUPERVISE_MAX_DELAY = 60.0
SUPERVISE_BACKOFF = BackoffPolicy(SUPERVISE_MIN_DELAY, SUPERVISE_MAX_DELAY)


async def supervise(loop: Callable[[], Awaitable[None]], report: FaultReport, name: str | None = None) -> None:
    """Run `loop` for good: if it raises, log and report it, wait (doubling while it keeps failing), rerun it.

    A loop that ran for longer than the current delay before failing starts the
    back-off again from SUPERVISE_MIN_DELAY. Cancellation passes through.
    """
    label = name or getattr(loop, "__qualname__", None) or getattr(getattr(loop, "func", None), "__qualname__", "loop")
    backoff = Backoff(SUPERVISE_BACKOFF)
    while True:
        began = trio.current_time()
        try:
            await loop()
            logger.error("loop %s returned; restarting it in %.1f s", label, backoff.next_delay)
        except Exception as error:  # noqa: BLE001 (the supervisor: logged with traceback, reported, restarted)
            logger.error("loop %s failed; restarting it in %.1f s", label, backoff.next_delay, exc_info=error)
            try:
                report(CONTAINED, "-", f"loop {label}: {type(error).__name__}: {' '.join(str(error).split())[:200]}")
            except Exception:  # noqa: BLE001 (a reporting bug must not stop the supervisor)
                logger.exception("fault report failed for loop %s", label)
        now = trio.current_time()
        if now - began > backoff.next_delay:  # it ran a while: a fresh failure, not one of a run of them
            backoff.succeeded()
        await trio.sleep(backoff.failed(now))
