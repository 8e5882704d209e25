"""py-libp2p's Pubsub with two faults of 0.8.1 mended (adapter-internal).

- **Spliced writes.** Three tasks write RPCs to a peer's pubsub stream (the
  outbound queue, the replay of recent messages to a new peer, the flush of
  identify-pending messages), and yamux's `write` takes its lock per frame, not
  per call: two RPCs larger than a frame arrive interleaved and the receiver
  can decode neither (measured: a 175,670-byte batch killed two honest
  daemons). Here each stream writes one whole RPC at a time.
- **Unbounded inbound work.** The read loop starts one task per received
  message and reads on at once, while validation waits for a semaphore of 10
  and gives up after `validation_timeout` (5 s by default), dropping the
  message silently and caching it as invalid. A burst from one peer thus
  loses whatever it cannot validate in 5 s (measured: 64 to 75 of 100 batches
  of 256 attestations), and nothing bounds the memory those tasks hold. Here
  a peer's stream is not read while `max_in_flight` of its messages are being
  processed: back-pressure reaches the sender through yamux's window, memory
  is bounded per peer, and the validation time-out is raised, since queueing
  is now bounded by the gate rather than by dropping.
"""

from __future__ import annotations

import weakref
from typing import Any

import trio
from libp2p.abc import INetStream
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub


class _GatedStream:
    """A peer's inbound pubsub stream whose reads wait while that peer has too many messages in flight."""

    def __init__(self, inner: INetStream, pubsub: GuardedPubsub, peer: ID) -> None:
        self._inner = inner
        self._pubsub = pubsub
        self._peer = peer

    async def read(self, n: int | None = None) -> bytes:
        await self._pubsub.wait_for_room(self._peer)
        return await self._inner.read(n)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class GuardedPubsub(Pubsub):
    """Pubsub with whole-RPC writes per stream and per-peer back-pressure on inbound messages."""

    def __init__(self, *args: Any, max_in_flight: int = 32, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_in_flight = max_in_flight
        self._write_locks: weakref.WeakKeyDictionary[INetStream, trio.Lock] = weakref.WeakKeyDictionary()
        self._in_flight: dict[ID, int] = {}
        self._room: dict[ID, trio.Event] = {}
        self.gated_reads = 0  # times a peer's stream waited for room: back-pressure that happened

    async def write_msg(self, stream: INetStream, rpc_msg: rpc_pb2.RPC) -> bool:
        lock = self._write_locks.get(stream)
        if lock is None:
            lock = self._write_locks[stream] = trio.Lock()
        async with lock:
            return await super().write_msg(stream, rpc_msg)

    async def continuously_read_stream(self, stream: INetStream) -> None:
        gated = _GatedStream(stream, self, stream.muxed_conn.peer_id)
        await super().continuously_read_stream(gated)  # type: ignore[arg-type]  # INetStream by delegation

    async def wait_for_room(self, peer: ID) -> None:
        while self._in_flight.get(peer, 0) >= self.max_in_flight:
            self.gated_reads += 1
            event = self._room.get(peer)
            if event is None:
                event = self._room[peer] = trio.Event()
            await event.wait()

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message) -> None:
        self._in_flight[msg_forwarder] = self._in_flight.get(msg_forwarder, 0) + 1
        try:
            await super().push_msg(msg_forwarder, msg)
        finally:
            left = self._in_flight[msg_forwarder] - 1
            if left:
                self._in_flight[msg_forwarder] = left
            else:
                del self._in_flight[msg_forwarder]
            if left < self.max_in_flight:
                event = self._room.pop(msg_forwarder, None)
                if event is not None:
                    event.set()
