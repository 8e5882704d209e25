"""GossipSub set up so that it loses nothing, behind our own validator and drain (adapter-internal).

Each setting answers a fact measured on py-libp2p 0.8.1 (../shared/notes):
- heartbeat ~1 s (default 120 s) and adaptive gossip OFF (it rewrote 1 s to 30 s);
  with it off `router.recent_message_deliveries` grows per message, so the
  node clears it periodically (`clear_deliveries`);
- the library's spam protection OFF: it counts per *forwarder* and throttled
  relaying (872/1000 delivered in a 5-node chain); our per-origin token bucket
  rejects instead, in the validator;
- both 32-message queues raised (`raise_library_queues`): with the defaults a
  100-message burst per node delivered 320 of 2000;
- content-addressed message ids (SHA-256 of the data): copies of the same bytes collapse;
- strict signing stays on: it authenticates the origin, which the rate limit keys on;
- eclipse protection OFF: it wants distinct IPs in the mesh (all 127.0.0.1 on loopback);
- the topic validator is async: a raising *sync* validator kills the whole pubsub
  service. Ours never raises: an exception in the caller's check counts as reject;
- writes to one pubsub stream interleave, and inbound work is unbounded: `GuardedPubsub`
  (_pubsub) writes one whole RPC at a time per stream and stops reading a peer while
  `max_in_flight` of its messages are being processed;
- a subscription can go unannounced: `_handle_new_peer` builds the hello, then awaits
  its write before it adds the peer, so a `subscribe()` in between reaches neither
  (seen in CI: a line of three nodes never learned one subscription in 60 s). We
  re-announce to every new pubsub stream and, periodically, to all
  (`keep_subscriptions_known`); a repeated subscription is a no-op for the receiver.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable

import libp2p.pubsub.pubsub as _pubsub_module
import trio
from libp2p.abc import IHost, ISubscriptionAPI
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID, PROTOCOL_ID_V11, PROTOCOL_ID_V12, GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.rpc_queue import DefaultMaxMessageSize, RpcQueue

from p2paudit.errors import InputError
from p2paudit.node.net._config import NodeConfig
from p2paudit.node.net._framing import TokenBucket
from p2paudit.node.net._pubsub import GuardedPubsub
from p2paudit.node.timing.bounded_map import BoundedMap
from p2paudit.node.wire import message_id

logger = logging.getLogger(__name__)

GossipHandler = Callable[[str, bytes], Awaitable[None] | None]
GossipValidator = Callable[[str, bytes], Awaitable[bool | object] | bool | object]
# A validator's answer for a message that is fine but not wanted here (e.g. a run announcement by a key
# this node does not follow): dropped and not forwarded, and nobody is blamed.
IGNORE = object()


def content_message_id(msg: rpc_pb2.Message) -> bytes:
    """Gossip message id: content-addressed, as docs/network.md specifies (wire.message_id: SHA-256 of a
    domain prefix and the data), so another implementation computes the same ids."""
    return message_id(msg.data)


def raise_library_queues(size: int) -> None:
    """Raise py-libp2p's two hard-coded 32-message queues (process-wide: 0.8.1 has no option).

    SUBSCRIPTION_CHANNEL_SIZE is read at each `subscribe()`. RpcQueue's default
    max_size is bound when its class is defined, so pubsub.py's name for it is
    pointed at a subclass with a larger default. Never lowers either.
    """
    _pubsub_module.SUBSCRIPTION_CHANNEL_SIZE = max(size, _pubsub_module.SUBSCRIPTION_CHANNEL_SIZE)
    # pubsub.py imports RpcQueue without re-exporting it: the name patched is that module's own.
    if size <= getattr(_pubsub_module.RpcQueue, "p2paudit_size", 0):  # type: ignore[attr-defined]
        return

    class LargeRpcQueue(RpcQueue):
        p2paudit_size = size

        def __init__(self, max_size: int = size, max_message_size: int = DefaultMaxMessageSize) -> None:
            super().__init__(max_size, max_message_size)

    _pubsub_module.RpcQueue = LargeRpcQueue  # type: ignore[attr-defined]  # (the same name)


class Gossip:
    """GossipSub router and Pubsub service, validators and handlers in our terms."""

    def __init__(self, host: IHost, config: NodeConfig, own_peer: str, emit: Callable[[str, str, str], None]) -> None:
        self.config = config
        self._own_peer = own_peer
        self._emit = emit
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
        self.pubsub = GuardedPubsub(
            host,
            self.router,
            msg_id_constructor=content_message_id,
            strict_signing=True,
            max_inbound_rpc_size=config.max_gossip_message + 64 * 1024,
            validation_timeout=config.validation_timeout,
            max_in_flight=config.max_in_flight_per_peer,
        )
        self._validators: dict[str, GossipValidator] = {}
        # origin -> its rate bucket; past the bound the oldest go (forgetting a bucket only forgives).
        self._buckets: BoundedMap[str, TokenBucket] = BoundedMap(config.max_tracked_origins)
        self._seen: BoundedMap[bytes, None] = BoundedMap(config.max_seen_ids)
        self.stats = {
            "delivered": 0,
            "duplicates": 0,
            "rejected": 0,
            "ignored": 0,
            "rate_limited": 0,
            "validator_errors": 0,
        }

    def set_validator(self, topic: str, fn: GossipValidator) -> None:
        self._validators[topic] = fn

    def clear_deliveries(self) -> None:
        # With adaptive gossip off nothing else trims this per-message list.
        self.router.recent_message_deliveries.clear()

    def _reject(self, counter: str, forwarder: ID, detail: str) -> bool:
        self.stats[counter] += 1
        self._emit(counter, str(forwarder), detail)
        return False

    async def _validate(self, topic: str, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        origin = str(ID(msg.from_id))
        if len(msg.data) > self.config.max_gossip_message:
            return self._reject("rejected", forwarder, f"{topic}: {len(msg.data)} bytes from {origin}")
        if origin != self._own_peer and self.config.origin_rate is not None:
            now = trio.current_time()
            bucket = self._buckets.get(origin)
            if bucket is None:
                bucket = TokenBucket(self.config.origin_rate, self.config.origin_burst, now)
                self._buckets.put(origin, bucket, now)
            if not bucket.take(now):
                return self._reject("rate_limited", forwarder, f"{topic}: origin {origin} over its rate")
        fn = self._validators.get(topic)
        if fn is None:
            return True
        try:
            result = fn(origin, msg.data)
            if inspect.isawaitable(result):
                result = await result
        except InputError as error:  # the message is provably bad: the forwarder relayed it
            return self._reject("rejected", forwarder, f"{topic}: message from {origin}: {error}")
        except Exception:  # our validator's bug: dropped, logged with its traceback, never the peer's fault
            logger.exception("validator for %s failed on a message from %s (our bug, not the peer's)", topic, origin)
            return self._reject("validator_errors", forwarder, f"{topic}: our validator failed on {origin}")
        if result is IGNORE:
            self.stats["ignored"] += 1
            return False
        if result is not True:
            return self._reject("rejected", forwarder, f"{topic}: message from {origin}")
        return True

    async def subscribe(self, topic: str, handler: GossipHandler, nursery: trio.Nursery) -> None:
        self.pubsub.set_topic_validator(topic, functools.partial(self._validate, topic), True)
        subscription = await self.pubsub.subscribe(topic)
        nursery.start_soon(self._drain, topic, subscription, handler)

    async def _drain(self, topic: str, subscription: ISubscriptionAPI, handler: GossipHandler) -> None:
        while True:
            msg = await subscription.get()
            # The library's seen-cache expires after 120 s; ours is bounded by count.
            digest = content_message_id(msg)
            if digest in self._seen:
                self.stats["duplicates"] += 1
                continue
            self._seen.put(digest, None)
            self.stats["delivered"] += 1
            try:
                result = handler(str(ID(msg.from_id)), msg.data)
                if inspect.isawaitable(result):
                    await result
            except Exception:  # one bad message must not stop the drain
                logger.exception("gossip handler for %s failed", topic)

    async def publish(self, topic: str, data: bytes) -> None:
        if len(data) > self.config.max_gossip_message:
            raise InputError(f"gossip message of {len(data)} bytes exceeds {self.config.max_gossip_message}")
        await self.pubsub.publish(topic, data)

    def _announcement(self, topics: frozenset[str]) -> rpc_pb2.RPC:
        packet = rpc_pb2.RPC()
        packet.subscriptions.extend(rpc_pb2.RPC.SubOpts(subscribe=True, topicid=t) for t in sorted(topics))
        return packet

    def announce_subscriptions(self, announced: dict[ID, tuple[object, frozenset[str]]], everyone: bool) -> int:
        """Send our topics to each peer whose pubsub stream or our topic set changed since
        `announced` (updated in place), or to every peer if `everyone`. Returns how many were sent."""
        peers = dict(self.pubsub.peers)
        for gone in announced.keys() - peers.keys():
            del announced[gone]
        topics = frozenset(self.pubsub.topic_ids)
        if not topics:
            return 0
        sent = 0
        for peer, stream in peers.items():
            before = announced.get(peer)
            if not everyone and before is not None and before[0] is stream and before[1] == topics:
                continue
            queue = self.pubsub.peer_queues.get(peer)
            if queue is not None and queue.push(self._announcement(topics)):
                announced[peer] = (stream, topics)
                sent += 1
        return sent

    async def keep_subscriptions_known(self, tick: float = 0.5) -> None:
        announced: dict[ID, tuple[object, frozenset[str]]] = {}
        last_full = trio.current_time()
        while True:
            await trio.sleep(tick)
            everyone = trio.current_time() - last_full >= self.config.subscription_refresh_interval
            if everyone:
                last_full = trio.current_time()
            self.announce_subscriptions(announced, everyone)

    def topic_peers(self, topic: str) -> list[str]:
        return sorted(str(p) for p in self.pubsub.peer_topics.get(topic, ()))
