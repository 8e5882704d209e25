"""The daemon's gossip, a part the Daemon holds: batches in, its own attestations and evidence out.

- in: a batch the adapter's stateless validator accepted (`stateless_validator`, run in a worker thread) is
  stored with append_many on the store's thread; the new conflicts it creates are announced;
- evidence in: checked from its bytes, its attestations (or split view) stored;
- conflicts out: the two signed attestations that prove a new dispute or equivocation, once per disputed step
  and per equivocating key and step, and each split view once, on the evidence topic;
- flush: every second, the attestations signed since the last flush in as few batches as the limits allow
  (a message costs the same whatever it carries: docs/benchmarks.md, "Batching across steps").
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from p2paudit.attest.record import decode_signed
from p2paudit.errors import InputError
from p2paudit.node import wire
from p2paudit.node.daemon import jobs as daemon_jobs
from p2paudit.node.daemon.state import Progress, Reporter
from p2paudit.node.daemon.store_owner import StoreOwner
from p2paudit.node.net import Node
from p2paudit.node.timing.bounded_map import BoundedMap
from p2paudit.node.wire.validate import check_evidence, check_gossip

logger = logging.getLogger(__name__)

MAX_ANNOUNCED_CONFLICTS = 100_000  # (kind, run, step, key) remembered as announced; the oldest are forgotten
FLUSH_INTERVAL = 1.0


class GossipWork:
    """The daemon's gossip part: made with the running node, the store's owner, the report lines and the
    progress it moves; it keeps the outbox and what it has announced."""

    def __init__(self, node: Node, db: StoreOwner, report: Reporter, progress: Progress) -> None:
        self.node, self.db, self.report, self.progress = node, db, report, progress
        # Own attestations wait here up to FLUSH_INTERVAL, so that one gossip message carries many of them:
        # a message costs ~3 ms per copy per node whatever it holds (docs/benchmarks.md, Network).
        self.outbox: dict[bytes, list[bytes]] = {}
        self.announced_views: set[tuple[str, str, int]] = set()  # split views (vkey, origin, size) gossiped
        self.announced_conflicts: BoundedMap[tuple[str, bytes, int, bytes], None] = BoundedMap(MAX_ANNOUNCED_CONFLICTS)

    # -- gossip in ------------------------------------------------------------------------------------------

    async def on_batch(self, peer: str, data: bytes) -> None:
        """A validated batch: store what is new; announce conflicts it creates."""
        try:
            envelopes = wire.decode_batch(data).envelopes
            fresh, new_conflicts = await self.db.call(daemon_jobs.append, list(envelopes))
        except InputError as exc:  # an unknown step or run: state-dependent, judged here
            self.report("refused", f"batch from {peer[:16]}..: {exc}")
            return
        if fresh:
            self.progress.got(fresh)
            self.report("received", f"{fresh} attestation(s) from {peer[:16]}..")
        for signed, kind in new_conflicts:
            await self.announce(signed, kind)

    async def on_evidence(self, peer: str, data: bytes) -> None:
        """Evidence checked from its bytes (the validator did); store the attestations it carries."""
        try:
            kind = check_evidence(data)
            view = await self.db.call(daemon_jobs.store_evidence, wire.decode_evidence(data), kind)
            if view is not None:
                self.announced_views.add(view)
        except InputError as exc:
            self.report("refused", f"evidence from {peer[:16]}..: {exc}")
            return
        self.report("evidence", f"{kind} from {peer[:16]}..")

    # -- conflicts out --------------------------------------------------------------------------------------

    async def announce(self, signed: bytes, kind: str) -> None:
        """Publish the two signed attestations that prove a new dispute or equivocation: once per disputed step,
        once per equivocating key and step (a flood of attestations joining one dispute proves nothing new and
        must not make us gossip evidence at the flooder's rate)."""
        record = decode_signed(signed).attestation
        key = (kind, record.run_id, record.step, record.verifier if kind == "equivocation" else b"")
        if key in self.announced_conflicts:
            return
        self.announced_conflicts.put(key, None)  # the oldest beyond MAX_ANNOUNCED_CONFLICTS are forgotten
        found = await self.db.call(daemon_jobs.evidence_for, signed, kind)
        if found is None:
            return
        step, run_id, message = found
        self.report("conflict", f"{kind} at step {step} of run {run_id.hex()[:12]}..")
        await self.node.publish(wire.EVIDENCE_TOPIC, message)

    async def announce_split_views(self) -> None:
        """Gossip each split view this ledger holds and has not announced yet."""
        for key, message in await self.db.call(daemon_jobs.split_views):
            if key in self.announced_views:
                continue
            self.announced_views.add(key)
            self.report("conflict", f"split view of {key[1]} at size {key[2]}")
            await self.node.publish(wire.EVIDENCE_TOPIC, message)

    # -- gossip out ----------------------------------------------------------------------------------------

    def queue(self, run_id: bytes, signed: list[bytes]) -> int:
        """Queue our own new attestations of `run_id` for the next flush; how many wait now, in all."""
        self.outbox.setdefault(run_id, []).extend(signed)
        return sum(len(items) for items in self.outbox.values())

    async def flush_outbox(self) -> None:
        """Publish the waiting attestations of each run in as few batches as the limits allow."""
        pending, self.outbox = self.outbox, {}
        for run_id, signed in pending.items():
            for message in wire.batches(run_id, signed):
                await self.node.publish(wire.run_topic(run_id), message)

    async def flush_loop(self) -> None:
        while True:
            await trio.sleep(FLUSH_INTERVAL)
            await self.flush_outbox()


def stateless_validator(topic: str) -> Callable[[str, bytes], Awaitable[bool]]:
    """The adapter's validator for `topic`: True, or InputError naming the fault (check_gossip); any other
    exception is our bug, which the adapter logs and never holds against the peer.

    The checks (up to 256 signatures a batch) run in a worker thread: on the event loop a batch held it
    for 150 ms while the store's thread checked signatures of its own (docs/benchmarks.md, hostile load)."""

    async def validate(origin: str, data: bytes) -> bool:
        await trio.to_thread.run_sync(check_gossip, topic, data)
        return True

    return validate
