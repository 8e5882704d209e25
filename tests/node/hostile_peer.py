"""A hostile peer driven in-process through the libp2p adapter, against daemons running as real processes.

Bad messages are built here from real signed attestations (node_helpers.record with the run's id), each
one kind of fault; the peer publishes them on the run's topic and can answer sync requests with pages that
do not prove out, or with two different signed checkpoints of one size. Every wait is bounded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from node_helpers import in_mesh, record, wait_until

from p2paudit.attest.record import sign_attestation
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.identity import Identity, identity_from_seed
from p2paudit.node import wire
from p2paudit.node.net import Node, NodeConfig, NodeEvent
from p2paudit.node.protocols import sync

LOOPBACK = ("/ip4/127.0.0.1/tcp/0",)
OTHER_RUN = hashlib.sha256(b"a run nobody follows").digest()


def hostile_key(label: str) -> Identity:
    return identity_from_seed(hashlib.sha256(b"hostile " + label.encode()).digest())


def envelope(identity: Identity, run_id: bytes, step: int, verdict: str = "match", time_ms: int = 1) -> bytes:
    return sign_attestation(identity, record(identity, step, verdict, run=run_id, time_ms=time_ms)).encoded


def batch(run_id: bytes, envelopes: list[bytes]) -> bytes:
    return wire.encode_batch(wire.GossipBatch(run_id, tuple(envelopes)))


def forged(identity: Identity, run_id: bytes) -> tuple[bytes, bytes]:
    """(message, envelope): a batch whose one attestation carries a signature with a flipped bit."""
    good = envelope(identity, run_id, 0)
    bad = good[:-1] + bytes([good[-1] ^ 1])  # the signature is the envelope's last field
    return batch(run_id, [bad]), bad


def non_canonical(identity: Identity, run_id: bytes) -> tuple[bytes, bytes]:
    """A well-signed batch whose version is a uint8 (0xcc 0x01) instead of the fixint 0x01."""
    item = envelope(identity, run_id, 1)
    good = batch(run_id, [item])
    head = wire.pack([wire.MAGIC_BATCH])[1:]  # the magic string's bytes
    cut = 1 + len(head)
    if good[cut] != 0x01:
        raise AssertionError("the batch layout changed: version byte not where expected")
    return good[:cut] + b"\xcc\x01" + good[cut + 1 :], item


def malformed(identity: Identity, run_id: bytes) -> tuple[bytes, bytes]:
    """A batch cut short in the middle of its one attestation."""
    item = envelope(identity, run_id, 2)
    good = batch(run_id, [item])
    return good[: len(good) - 40], item


def oversized(identity: Identity, run_id: bytes) -> tuple[bytes, bytes]:
    """A batch padded past MAX_BATCH_BYTES (but under the adapter's 1 MiB gossip limit)."""
    item = envelope(identity, run_id, 3)
    body = wire.pack([wire.MAGIC_BATCH, wire.VERSION, run_id, [item] * (wire.MAX_BATCH_BYTES // len(item) + 8)])
    if not wire.MAX_BATCH_BYTES < len(body) < NodeConfig().max_gossip_message:
        raise AssertionError(f"oversized batch has {len(body)} bytes")
    return body, item


def wrong_run(identity: Identity, run_id: bytes) -> tuple[bytes, bytes]:
    """A well-formed, well-signed batch of another run (published on this run's topic)."""
    item = envelope(identity, OTHER_RUN, 0)
    return batch(OTHER_RUN, [item]), item


def beyond_run(identity: Identity, run_id: bytes, steps: int, n: int) -> list[tuple[bytes, bytes]]:
    """n distinct valid batches, each one attestation for a step past the run's end (state-dependent)."""
    out = []
    for i in range(n):
        item = envelope(identity, run_id, steps + 1 + i % 7, time_ms=1000 + i)
        out.append((batch(run_id, [item]), item))
    return out


@dataclass
class HostileLedger:
    """A real ledger of the hostile key's own attestations, served (or lied about) over sync."""

    store: AttestationStore
    identity: Identity
    note: str = ""

    @classmethod
    def make(cls, path: Path, identity: Identity, run_id: bytes, steps: int, envelopes: list[bytes]):
        store = AttestationStore.open(path, origin_for(identity.public_key))
        store.register_run(run_id, steps, "hostile")
        store.append_many(envelopes)
        ledger = cls(store, identity)
        ledger.note = store.checkpoint(identity)
        return ledger


@dataclass
class SyncLiar:
    """Answers sync requests from its ledgers. A status request gets the note of `ledgers[stage]`, or when
    stage is None of the ledger for the peer's n-th status request (the last one from then on), so two
    ledgers of one size give that peer a split view. Pages come from the ledger of the peer's last status;
    `swap` swaps each page's first two entries, so the page no longer proves out under the note."""

    ledgers: list[HostileLedger]
    swap: bool = False
    stage: int | None = None
    statuses: dict[str, int] = field(default_factory=dict)
    serving: dict[str, HostileLedger] = field(default_factory=dict)
    pages: int = 0

    async def serve(self, peer: str, request: bytes) -> bytes:
        decoded = wire.decode_sync_request(request)
        if isinstance(decoded, wire.StatusRequest):
            self.statuses[peer] = n = self.statuses.get(peer, 0) + 1
            index = self.stage if self.stage is not None else min(n, len(self.ledgers)) - 1
            ledger = self.serving[peer] = self.ledgers[index]
            return sync.serve_sync(ledger.store, request, ledger.note)
        ledger = self.serving[peer]
        self.pages += 1
        page = sync.page_for(ledger.store, decoded.start, decoded.count, decoded.size)
        if self.swap and len(page.entries) >= 2:
            page = replace(page, entries=(page.entries[1], page.entries[0], *page.entries[2:]))
        return wire.encode_sync_response(page)


def hostile_config() -> NodeConfig:
    """Loopback; it asks nobody for peers: it talks to the node it is pointed at."""
    return NodeConfig(listen=LOOPBACK, peer_exchange_interval=3600.0, peer_exchange_max_interval=3600.0)


def record_events(events: list[NodeEvent]) -> Callable[[NodeEvent], None]:
    return events.append


async def connect_on_topic(node: Node, addr: str, topic: str, timeout: float = 30.0) -> str:
    """Dial `addr`, wait until that peer is known on `topic` (our publish reaches it at once, mesh or fanout)
    and grafted into our mesh on every topic we subscribed to (so what it gossips there reaches us): what a
    heartbeat or two was once slept for. Its peer id."""
    target = await node.connect(addr)

    def ready() -> bool:
        joined = node.gossip.router.mesh  # the topics we subscribed to
        return target in node.gossip_peers(topic) and all(in_mesh(node, t, target) for t in joined)

    await wait_until(ready, f"{target} to join {topic} and our meshes", timeout)
    return target


async def refuse(node: Node, peers: list[str]) -> None:
    """Keep away from these peers (both directions), so whatever reaches them came through someone else."""
    for peer in peers:
        await node.penalize(peer, "kept apart by the test", 3600.0)
