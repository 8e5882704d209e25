"""The one module that touches py-libp2p: a host, gossip, request/response, bans.

The rest of `p2paudit.node` speaks our terms through `open_node` and `Node`:
peers are base58 peer-id strings, addresses are multiaddr strings, payloads are
opaque bytes. Every setting below answers a measured fact about py-libp2p 0.8.1
(../shared/notes/py-libp2p-0.8.1.md); its defaults silently lose messages.

Connection gating: py-libp2p's gate filters by IP only (useless on loopback),
so a banned peer is refused inside the Noise handshake (`_GatedNoise`): inbound
after the peer has proved its id, outbound before dialling. The connected-
notifee closes any connection that slips through (an upgrade already in flight).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import libp2p.pubsub.pubsub as _pubsub_module
import multiaddr
import trio
from libp2p import new_host
from libp2p.abc import IHost, INetConn, INetStream, INetwork, INotifee, IRawConnection, ISecureConn
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.exceptions import BaseLibp2pError
from libp2p.identity_utils import create_identity_from_seed
from libp2p.kad_dht.kad_dht import DHTMode, KadDHT
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.peer.peerstore import PERMANENT_ADDR_TTL
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, PROTOCOL_ID_V12, GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.pubsub.rpc_queue import DefaultMaxMessageSize, RpcQueue
from libp2p.security.exceptions import HandshakeFailure
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from libp2p.tools.anyio_service import background_trio_service

from p2paudit.errors import InputError, InternalError
from p2paudit.identity import Identity, peer_id_of, private_seed
from p2paudit.node.libp2p_config import NodeConfig, NodeEvent
from p2paudit.node.libp2p_framing import TokenBucket, read_frame, write_frame
from p2paudit.node.libp2p_peers import decode_peer_list, encode_peer_list

logger = logging.getLogger(__name__)

PEERS_PROTOCOL = "/p2paudit/peers/1.0.0"
# A peer list is at most max_peer_list entries of a few short strings.
_MAX_PEER_LIST_BYTES = 64 * 1024
_NETWORK_ERRORS = (BaseLibp2pError, trio.BrokenResourceError, trio.ClosedResourceError, OSError)

GossipHandler = Callable[[str, bytes], Awaitable[None] | None]
GossipValidator = Callable[[str, bytes], Awaitable[bool] | bool]
RequestHandler = Callable[[str, bytes], Awaitable[bytes]]


class RequestFailed(InputError):
    """A request to a peer failed: refused, reset, malformed or oversize answer."""


class RequestTimedOut(RequestFailed):
    """A request to a peer got no answer within its time-out."""


def content_message_id(msg: rpc_pb2.Message) -> bytes:
    """Gossip message id: SHA-256 of the data, so copies of the same bytes collapse."""
    return hashlib.sha256(msg.data).digest()


def _raise_library_queues(size: int) -> None:
    """Raise py-libp2p's two hard-coded 32-message queues (process-wide; 0.8.1 has no option).

    SUBSCRIPTION_CHANNEL_SIZE is read at each `subscribe()`; RpcQueue's default
    max_size is bound when the class is defined, so `pubsub.py`'s name is
    pointed at a subclass with a larger default.
    """
    _pubsub_module.SUBSCRIPTION_CHANNEL_SIZE = max(size, _pubsub_module.SUBSCRIPTION_CHANNEL_SIZE)
    current = getattr(_pubsub_module.RpcQueue, "p2paudit_size", 0)
    if size > current:

        class _LargeRpcQueue(RpcQueue):
            p2paudit_size = size

            def __init__(self, max_size: int = size, max_message_size: int = DefaultMaxMessageSize) -> None:
                super().__init__(max_size, max_message_size)

        _pubsub_module.RpcQueue = _LargeRpcQueue


class _GatedNoise(NoiseTransport):
    """Noise that refuses banned peers: outbound before the handshake, inbound right after it."""

    def __init__(self, key_pair, is_banned: Callable[[ID], bool]) -> None:
        super().__init__(key_pair, noise_privkey=create_x25519_key_pair().private_key)
        self._is_banned = is_banned

    async def secure_inbound(self, conn: IRawConnection) -> ISecureConn:
        secure = await super().secure_inbound(conn)
        if self._is_banned(secure.get_remote_peer()):
            await secure.close()
            raise HandshakeFailure(f"peer {secure.get_remote_peer()} is banned")
        return secure

    async def secure_outbound(self, conn: IRawConnection, peer_id: ID) -> ISecureConn:
        if self._is_banned(peer_id):
            await conn.close()
            raise HandshakeFailure(f"peer {peer_id} is banned")
        return await super().secure_outbound(conn, peer_id)


class _Notifee(INotifee):
    def __init__(self, node: Node) -> None:
        self._node = node

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        pass

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        pass

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        self._node._on_connected(conn.muxed_conn.peer_id)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        self._node._on_disconnected(conn.muxed_conn.peer_id)

    async def listen(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        pass

    async def listen_close(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        pass


@dataclass
class _Handler:
    protocol_id: str
    fn: RequestHandler
    max_request: int
    max_response: int
    timeout: float
    max_concurrent_per_peer: int


def parse_peer_id(peer: str) -> ID:
    """A peer id from its base58 text; InputError if it is not one."""
    try:
        return ID.from_base58(peer)
    except Exception as error:  # base58/multihash raise assorted ValueErrors
        raise InputError(f"not a peer id: {peer[:80]!r}") from error


def parse_peer_addr(addr: str) -> PeerInfo:
    """PeerInfo from a multiaddr ending in /p2p/<peer id>; InputError otherwise."""
    try:
        return info_from_p2p_addr(multiaddr.Multiaddr(addr))
    except Exception as error:
        raise InputError(f"peer address {addr[:200]!r} is not a multiaddr ending in /p2p/<peer id>") from error


class Node:
    """A running libp2p node in our terms. Made by `open_node`; not constructed directly."""

    def __init__(self, identity: Identity, config: NodeConfig, on_event: Callable[[NodeEvent], None] | None) -> None:
        self.config = config
        self._on_event = on_event
        self._key_pair = create_identity_from_seed(private_seed(identity))
        self.peer_id = peer_id_of(identity.public_key)
        if str(ID.from_pubkey(self._key_pair.public_key)) != self.peer_id:
            raise InternalError("libp2p peer id differs from p2paudit.identity.peer_id_of")
        self._banned_until: dict[str, float] = {}
        self._connected: set[str] = set()
        self._bootstrap: dict[str, PeerInfo] = {}
        self._buckets: dict[str, TokenBucket] = {}
        self._validators: dict[str, GossipValidator] = {}
        self._out_limits: dict[str, trio.Semaphore] = {}
        self._in_active: dict[tuple[str, str], int] = {}
        self._seen: OrderedDict[bytes, None] = OrderedDict()
        self.stats = {"delivered": 0, "duplicates": 0, "rejected": 0, "rate_limited": 0, "validator_errors": 0}
        self._nursery: trio.Nursery | None = None
        self.host: IHost = new_host(
            key_pair=self._key_pair,
            sec_opt={NOISE_PROTOCOL_ID: _GatedNoise(self._key_pair, self._is_banned_id)},
            muxer_opt={YAMUX_PROTOCOL_ID: Yamux},
            listen_addrs=[multiaddr.Multiaddr(a) for a in config.listen],
            connection_config=ConnectionConfig(max_connections_per_peer=1, dial_timeout=config.dial_timeout),
            enable_mDNS=False,
        )
        self.router = GossipSub(
            protocols=[PROTOCOL_ID_V12, PROTOCOL_ID_V11, PROTOCOL_ID],
            degree=config.mesh_degree,
            degree_low=config.mesh_degree_low,
            degree_high=config.mesh_degree_high,
            heartbeat_interval=config.heartbeat_interval,
            adaptive_gossip_enabled=False,
            spam_protection_enabled=False,
            eclipse_protection_enabled=False,
        )
        self.pubsub = Pubsub(
            self.host,
            self.router,
            msg_id_constructor=content_message_id,
            strict_signing=True,
            max_inbound_rpc_size=config.max_gossip_rpc,
        )
        # Provider records only; the per-subnet cap would admit two loopback peers at most.
        self.dht = KadDHT(self.host, DHTMode.SERVER, enable_values=False, max_peers_per_subnet=0)

    # --- peers and events -------------------------------------------------

    def listen_addrs(self) -> list[str]:
        """The addresses actually bound, each ending in /p2p/<our peer id>."""
        return [str(a) for a in self.host.get_addrs()]

    def connected_peers(self) -> list[str]:
        return sorted(str(p) for p in self.host.get_connected_peers())

    def is_banned(self, peer: str) -> bool:
        until = self._banned_until.get(peer)
        return until is not None and until > time.monotonic()

    def _is_banned_id(self, peer: ID) -> bool:
        return self.is_banned(str(peer))

    def _emit(self, kind: str, peer: str, detail: str = "") -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(NodeEvent(kind=kind, peer=peer, detail=detail))
        except Exception:
            logger.exception("node event callback failed on %s %s", kind, peer)

    def _on_connected(self, peer_id: ID) -> None:
        peer = str(peer_id)
        if self.is_banned(peer):
            # An upgrade that was in flight when the ban began: close it now.
            if self._nursery is not None:
                self._nursery.start_soon(self._disconnect_quietly, peer_id)
            return
        if peer not in self._connected:
            self._connected.add(peer)
            self._emit("connected", peer)
            if self._nursery is not None:
                self._nursery.start_soon(self._add_dht_peer, peer_id)

    def _on_disconnected(self, peer_id: ID) -> None:
        peer = str(peer_id)
        if peer in self._connected and not self.host.get_network().get_connections(peer_id):
            self._connected.discard(peer)
            self._emit("disconnected", peer)

    async def _disconnect_quietly(self, peer_id: ID) -> None:
        try:
            await self.host.disconnect(peer_id)
        except _NETWORK_ERRORS as error:
            logger.debug("disconnect %s: %s", peer_id, error)

    async def _add_dht_peer(self, peer_id: ID) -> None:
        # Identify must finish first: the routing table admits only peers that speak the DHT protocol.
        await trio.sleep(0.5)
        try:
            await self.dht.add_peer(peer_id)
        except _NETWORK_ERRORS as error:
            logger.debug("dht add_peer %s: %s", peer_id, error)

    # --- provider records -----------------------------------------------------

    async def provide(self, key: bytes) -> bool:
        """Announce in the DHT that we serve `key` (e.g. a run id); True if any peer stored it."""
        return await self.dht.provide(_dht_key(key))

    async def find_providers(self, key: bytes, count: int = 20, timeout: float = 10.0) -> list[tuple[str, list[str]]]:
        """(peer, addresses) of up to `count` providers of `key` other than us; addresses are kept for an hour."""
        with trio.move_on_after(timeout):
            infos = await self.dht.find_providers(_dht_key(key), count)
            out: dict[str, list[str]] = {}
            for info in infos:  # the same provider comes back once per peer that stored it
                peer = str(info.peer_id)
                if peer != self.peer_id and info.addrs and peer not in out:
                    self.host.get_peerstore().add_addrs(info.peer_id, info.addrs, self.config.exchanged_addr_ttl)
                    out[peer] = [str(a) for a in info.addrs]
            return list(out.items())
        raise RequestTimedOut(f"find_providers timed out after {timeout} s")

    async def connect(self, addr: str) -> str:
        """Dial a peer at a /p2p/ multiaddr; returns its peer id. RequestFailed if it fails."""
        info = parse_peer_addr(addr)
        await self._dial(info)
        return str(info.peer_id)

    async def _dial(self, info: PeerInfo, ttl: int = PERMANENT_ADDR_TTL) -> None:
        peer = str(info.peer_id)
        if self.is_banned(peer):
            raise RequestFailed(f"peer {peer} is banned")
        if peer == self.peer_id:
            raise InputError("refusing to dial ourselves")
        # The swarm's negative cache would refuse a redial for 60 s after one failure;
        # our own loop does the back-off.
        self.host.get_network().unblock_peer(info.peer_id)
        try:
            with trio.fail_after(self.config.dial_timeout):
                await self.host.connect(info)
        except trio.TooSlowError:
            raise RequestTimedOut(f"dial {peer} timed out after {self.config.dial_timeout} s") from None
        except _NETWORK_ERRORS as error:
            raise RequestFailed(f"dial {peer} failed: {str(error).splitlines()[0][:200]}") from None
        finally:
            # connect() stores addresses with a 120 s TTL; keep ours as asked.
            self.host.get_peerstore().add_addrs(info.peer_id, info.addrs, ttl)

    async def add_bootstrap(self, addr: str) -> None:
        """Keep this peer for good: permanent address, redialled with back-off while we run."""
        info = parse_peer_addr(addr)
        peer = str(info.peer_id)
        if peer == self.peer_id or peer in self._bootstrap:
            return
        self._bootstrap[peer] = info
        self.host.get_peerstore().add_addrs(info.peer_id, info.addrs, PERMANENT_ADDR_TTL)
        if self._nursery is None:
            raise InternalError("add_bootstrap called on a node that is not running")
        self._nursery.start_soon(self._keep_bootstrap, info)

    async def _keep_bootstrap(self, info: PeerInfo) -> None:
        delay = self.config.redial_min
        peer = str(info.peer_id)
        while True:
            if peer in self._connected or self.is_banned(peer):
                delay = self.config.redial_min
                await trio.sleep(self.config.redial_min)
                continue
            try:
                await self._dial(info)
                delay = self.config.redial_min
            except InputError as error:
                logger.info("bootstrap %s: %s; retry in %.1f s", peer, error, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, self.config.redial_max)

    async def penalize(self, peer: str, reason: str, seconds: float | None = None) -> None:
        """Disconnect `peer` and refuse it, both directions, for `seconds` (default config.ban_seconds)."""
        peer_id = parse_peer_id(peer)
        duration = self.config.ban_seconds if seconds is None else seconds
        self._banned_until[peer] = time.monotonic() + duration
        logger.warning("banning %s for %.0f s: %s", peer, duration, reason[:200])
        self.pubsub.add_to_blacklist(peer_id)
        # Without addresses nothing (our loops, the swarm's auto-connector) dials it.
        self.host.get_peerstore().clear_addrs(peer_id)
        self._emit("banned", peer, reason)
        await self._disconnect_quietly(peer_id)

    def _lift_expired_bans(self) -> None:
        now = time.monotonic()
        for peer, until in list(self._banned_until.items()):
            if until <= now:
                del self._banned_until[peer]
                peer_id = parse_peer_id(peer)
                self.pubsub.remove_from_blacklist(peer_id)
                info = self._bootstrap.get(peer)
                if info is not None:
                    self.host.get_peerstore().add_addrs(peer_id, info.addrs, PERMANENT_ADDR_TTL)
                self._emit("unbanned", peer)

    async def _maintain(self) -> None:
        last_clear = time.monotonic()
        while True:
            await trio.sleep(0.25)
            self._lift_expired_bans()
            if time.monotonic() - last_clear >= self.config.deliveries_clear_interval:
                # With adaptive gossip off nothing trims this per-message list.
                self.router.recent_message_deliveries.clear()
                last_clear = time.monotonic()
            if len(self._buckets) > self.config.max_tracked_origins:
                self._buckets.clear()

    # --- peer exchange ------------------------------------------------------

    async def _serve_peers(self, peer: str, request: bytes) -> bytes:
        entries = []
        store = self.host.get_peerstore()
        for other in self.connected_peers():
            if other == peer or self.is_banned(other):
                continue
            addrs = [str(a) for a in store.addrs(parse_peer_id(other))][: self.config.max_addrs_per_peer]
            if addrs:
                entries.append((other, addrs))
            if len(entries) >= self.config.max_peer_list:
                break
        return encode_peer_list(entries)

    async def exchange_peers(self, peer: str) -> int:
        """Ask `peer` for its peers and dial the new ones; returns how many we dialled successfully."""
        answer = await self.request(peer, PEERS_PROTOCOL, b"", max_response=_MAX_PEER_LIST_BYTES, timeout=5.0)
        entries = decode_peer_list(answer, self.config.max_peer_list, self.config.max_addrs_per_peer)
        dialled = 0
        for other, addrs in entries:
            if other == self.peer_id or other in self._connected or self.is_banned(other):
                continue
            if len(self._connected) >= self.config.max_peers:
                break
            info = PeerInfo(parse_peer_id(other), [multiaddr.Multiaddr(a) for a in addrs])
            try:
                await self._dial(info, ttl=self.config.exchanged_addr_ttl)
                dialled += 1
            except InputError as error:
                logger.info("peer %s from %s: %s", other, peer, error)
        return dialled

    async def _exchange_loop(self) -> None:
        while True:
            await trio.sleep(self.config.peer_exchange_interval)
            for peer in list(self._connected):
                if len(self._connected) >= self.config.max_peers:
                    break
                try:
                    await self.exchange_peers(peer)
                except InputError as error:
                    logger.info("peer exchange with %s: %s", peer, error)

    # --- gossip ---------------------------------------------------------------

    def set_validator(self, topic: str, fn: GossipValidator) -> None:
        """fn(origin_peer, data) -> bool, sync or async; an exception counts as reject and is logged."""
        self._validators[topic] = fn

    async def _validate(self, topic: str, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        origin = str(ID(msg.from_id))
        if origin != self.peer_id and self.config.origin_rate is not None:
            bucket = self._buckets.get(origin)
            if bucket is None:
                bucket = self._buckets[origin] = TokenBucket(self.config.origin_rate, self.config.origin_burst)
            if not bucket.take():
                self.stats["rate_limited"] += 1
                self._emit("rate_limited", origin, f"topic {topic} via {forwarder}")
                return False
        fn = self._validators.get(topic)
        if fn is None:
            return True
        try:
            result = fn(origin, msg.data)
            if inspect.isawaitable(result):
                result = await result
        except Exception as error:
            self.stats["validator_errors"] += 1
            logger.warning("validator for %s raised on a message from %s: %r", topic, origin, error)
            return False
        if result is not True:
            self.stats["rejected"] += 1
            return False
        return True

    async def subscribe(self, topic: str, handler: GossipHandler) -> None:
        """Join `topic`; a background task drains it and calls handler(origin_peer, data) once per message."""
        if self._nursery is None:
            raise InternalError("subscribe called on a node that is not running")
        # Async, so an exception can never reach the library (a raising sync validator kills pubsub).
        self.pubsub.set_topic_validator(topic, functools.partial(self._validate, topic), True)
        subscription = await self.pubsub.subscribe(topic)
        self._nursery.start_soon(self._drain, topic, subscription, handler)

    async def _drain(self, topic: str, subscription, handler: GossipHandler) -> None:
        while True:
            msg = await subscription.get()
            digest = content_message_id(msg)
            if digest in self._seen:
                self.stats["duplicates"] += 1
                continue
            self._seen[digest] = None
            if len(self._seen) > self.config.max_seen_ids:
                self._seen.popitem(last=False)
            self.stats["delivered"] += 1
            try:
                result = handler(str(ID(msg.from_id)), msg.data)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                logger.exception("gossip handler for %s failed", topic)

    async def publish(self, topic: str, data: bytes) -> None:
        """Publish `data` on `topic` (delivered to our own handler too, if subscribed)."""
        if len(data) > self.config.max_gossip_message:
            raise InputError(f"gossip message of {len(data)} bytes exceeds {self.config.max_gossip_message}")
        await self.pubsub.publish(topic, data)

    def gossip_peers(self, topic: str) -> list[str]:
        """Peers known to be subscribed to `topic`."""
        return sorted(str(p) for p in self.pubsub.peer_topics.get(topic, ()))

    # --- request / response ---------------------------------------------------

    def set_handler(
        self,
        protocol_id: str,
        handler: RequestHandler,
        *,
        max_request: int,
        max_response: int,
        timeout: float,
        max_concurrent_per_peer: int | None = None,
    ) -> None:
        """Serve `protocol_id`: one request frame in, handler(peer, request) -> one response frame out.

        A request over max_request is refused before its body is read; a handler
        that raises or runs past `timeout` resets the stream (the caller gets RequestFailed).
        """
        limit = self.config.max_requests_per_peer if max_concurrent_per_peer is None else max_concurrent_per_peer
        reg = _Handler(protocol_id, handler, max_request, max_response, timeout, limit)
        self.host.set_stream_handler(TProtocol(protocol_id), functools.partial(self._serve, reg))

    async def _serve(self, reg: _Handler, stream: INetStream) -> None:
        peer = str(stream.muxed_conn.peer_id)
        key = (reg.protocol_id, peer)
        if self.is_banned(peer) or self._in_active.get(key, 0) >= reg.max_concurrent_per_peer:
            logger.info("refusing %s from %s: banned or too many concurrent requests", reg.protocol_id, peer)
            await _reset_quietly(stream)
            return
        self._in_active[key] = self._in_active.get(key, 0) + 1
        try:
            with trio.move_on_after(reg.timeout) as scope:
                request = await read_frame(stream, reg.max_request)
                response = await reg.fn(peer, request)
                await write_frame(stream, response, reg.max_response)
            if scope.cancelled_caught:
                logger.warning("%s from %s timed out after %.1f s", reg.protocol_id, peer, reg.timeout)
                self._emit("refused", peer, f"{reg.protocol_id}: timed out after {reg.timeout} s")
                await _reset_quietly(stream)
                return
        except InputError as error:
            logger.info("%s from %s refused: %s", reg.protocol_id, peer, error)
            self._emit("refused", peer, f"{reg.protocol_id}: {error}")
            await _reset_quietly(stream)
            return
        except _NETWORK_ERRORS as error:
            logger.info("%s from %s: stream failed: %s", reg.protocol_id, peer, error)
            await _reset_quietly(stream)
            return
        except Exception:
            logger.exception("%s handler failed on a request from %s", reg.protocol_id, peer)
            await _reset_quietly(stream)
            return
        finally:
            remaining = self._in_active[key] - 1
            if remaining:
                self._in_active[key] = remaining
            else:
                del self._in_active[key]
        await _close_quietly(stream)

    async def request(
        self,
        peer: str,
        protocol_id: str,
        data: bytes,
        *,
        max_response: int = 1 << 20,
        timeout: float = 10.0,
    ) -> bytes:
        """Send one request frame to `peer` and return its response (at most max_response bytes).

        RequestTimedOut past `timeout`; RequestFailed if the peer is banned, refuses,
        resets, or answers with a malformed or oversize frame.
        """
        peer_id = parse_peer_id(peer)
        if self.is_banned(peer):
            raise RequestFailed(f"peer {peer} is banned")
        limit = self._out_limits.get(peer)
        if limit is None:
            limit = self._out_limits[peer] = trio.Semaphore(self.config.max_requests_per_peer)
        stream = None
        async with limit:
            try:
                with trio.fail_after(timeout):
                    stream = await self.host.new_stream(peer_id, [TProtocol(protocol_id)])
                    await write_frame(stream, data, self.config.max_request)
                    response = await read_frame(stream, max_response)
            except trio.TooSlowError:
                await _reset_quietly(stream)
                raise RequestTimedOut(f"{protocol_id} request to {peer} timed out after {timeout} s") from None
            except InputError as error:
                await _reset_quietly(stream)
                raise RequestFailed(f"{protocol_id} request to {peer}: {error}") from None
            except _NETWORK_ERRORS as error:
                await _reset_quietly(stream)
                detail = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
                raise RequestFailed(f"{protocol_id} request to {peer} failed: {detail}") from None
        await _close_quietly(stream)
        return response


def _dht_key(key: bytes) -> str:
    # KadDHT takes a hex multihash string: sha2-256 (0x12), 32 bytes (0x20), of our key.
    return "1220" + hashlib.sha256(b"p2paudit/dht/" + key).hexdigest()


async def _reset_quietly(stream: INetStream | None) -> None:
    if stream is None:
        return
    try:
        await stream.reset()
    except _NETWORK_ERRORS:
        pass


async def _close_quietly(stream: INetStream | None) -> None:
    if stream is None:
        return
    try:
        await stream.close()
    except _NETWORK_ERRORS:
        pass


@asynccontextmanager
async def open_node(
    identity: Identity,
    config: NodeConfig | None = None,
    on_event: Callable[[NodeEvent], None] | None = None,
) -> AsyncIterator[Node]:
    """Start a node (listening, gossip, peer exchange, bootstrap redial); stop it all on exit."""
    config = NodeConfig() if config is None else config
    _raise_library_queues(config.queue_size)
    node = Node(identity, config, on_event)
    node.host.get_network().register_notifee(_Notifee(node))
    node.set_handler(
        PEERS_PROTOCOL,
        node._serve_peers,
        max_request=0,
        max_response=_MAX_PEER_LIST_BYTES,
        timeout=5.0,
    )
    async with node.host.run(listen_addrs=[multiaddr.Multiaddr(a) for a in config.listen]):
        async with (
            background_trio_service(node.pubsub),
            background_trio_service(node.router),
            background_trio_service(node.dht),
        ):
            await node.pubsub.wait_until_ready()
            async with trio.open_nursery() as nursery:
                node._nursery = nursery
                nursery.start_soon(node._maintain)
                nursery.start_soon(node._exchange_loop)
                for addr in config.bootstrap:
                    await node.add_bootstrap(addr)
                try:
                    yield node
                finally:
                    node._nursery = None
                    nursery.cancel_scope.cancel()
            # Close every connection and listener while pubsub still runs: otherwise an
            # inbound gossip RPC arriving during teardown spawns into pubsub's closed
            # nursery ("Nursery is closed to new arrivals") and the whole node raises.
            with trio.move_on_after(5, shield=True):
                await node.host.get_network().close()
