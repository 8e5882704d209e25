"""The audit part the Daemon holds: which step to replay next, the replay off the event loop, the signing.

`audit_loop` takes a remote step fetched ahead (`ready`, filled by daemon.fetch), or picks the next step
of a local run (auditor.next_step through jobs.pick), replays it in a worker thread (abandoned on
shutdown), signs and appends the audits, queues them for gossip and announces new conflicts. A step whose
replay could not start is backed off from (`step_retry`, shared with the fetching part).
"""

from __future__ import annotations

import functools

import trio

from p2paudit.attest.errors import AttestationError
from p2paudit.audit.replay import release_replay_memory
from p2paudit.errors import InputError
from p2paudit.identity import Identity
from p2paudit.node import wire
from p2paudit.node.daemon import jobs as daemon_jobs
from p2paudit.node.daemon.config import DaemonConfig
from p2paudit.node.daemon.gossip import GossipWork
from p2paudit.node.daemon.peer_sync import PeerSync, peer_public_key
from p2paudit.node.daemon.sources import Prefetched, RemoteSource, RunSource
from p2paudit.node.daemon.state import Progress, Reporter
from p2paudit.node.daemon.store_owner import StoreOwner
from p2paudit.node.net import Node
from p2paudit.node.timing.backoff import Backoffs

IDLE_POLL = 0.5
SPILL_GRACE = 2.0


class Auditing:
    """Made with the daemon's config, the store's owner, the node key, the running node (whose peers' keys
    the assignment avoids), the runs audited (the daemon's list), the prefetched steps (`ready`, shared
    with the fetching part), the step back-offs, and the parts it hands its work to: `peers` (who can be
    synced: spill-over waits for them), `gossip` (own attestations out), the report lines and the progress."""

    def __init__(
        self,
        config: DaemonConfig,
        db: StoreOwner,
        identity: Identity,
        node: Node,
        sources: list[RunSource],
        ready: dict[bytes, tuple[RemoteSource, Prefetched]],
        step_retry: Backoffs[tuple[bytes, int]],
        peers: PeerSync,
        gossip: GossipWork,
        report: Reporter,
        progress: Progress,
    ) -> None:
        self.config, self.db, self.identity, self.node, self.sources = config, db, identity, node, sources
        self.ready, self.step_retry, self.peers, self.gossip = ready, step_retry, peers, gossip
        self.report, self.progress = report, progress
        self.busy_step: tuple[bytes, int] | None = None
        # A replay ran since the heap's freed memory was last given back (audit.replay.release_replay_memory).
        self.replayed_since_release = False

    def take_ready(self) -> tuple[RemoteSource, Prefetched] | None:
        """The prefetched step that has waited longest, taken out of `ready`."""
        if not self.ready:
            return None
        return self.ready.pop(next(iter(self.ready)))

    # -- picking ----------------------------------------------------------------------------------------------

    def peer_keys(self) -> list[bytes]:
        keys = []
        for peer in self.node.connected_peers():
            try:
                keys.append(peer_public_key(peer))
            except InputError:
                continue
        return keys

    def may_spill(self) -> bool:
        """Spill over to unassigned steps only when every peer we can sync with was synced since the last change
        and nothing changed for SPILL_GRACE seconds: what peers already checked is then known here."""
        peers = self.peers.syncable_peers()
        return peers <= self.progress.synced_since_change and self.progress.quiet_for() >= SPILL_GRACE

    async def _pick(self) -> tuple[RunSource, int] | None:
        spill, peers = self.may_spill(), self.peer_keys()
        avoid: dict[bytes, set[int]] = {}
        for run_id, step in self.step_retry.waiting(trio.current_time()):
            avoid.setdefault(run_id, set()).add(step)
        frozen = {run_id: frozenset(steps) for run_id, steps in avoid.items()}
        local = tuple(s for s in self.sources if not isinstance(s, RemoteSource))  # remote ones: fetched ahead
        return await self.db.call(daemon_jobs.pick, self.identity, local, peers, self.config.policy, spill, frozen)

    async def pick_step(self, source: RunSource) -> int | None:
        """The next step of `source` alone (fetch ahead), avoiding steps backed off from and the one replayed."""
        run_id = source.manifest.run_id
        avoid = {step for rid, step in self.step_retry.waiting(trio.current_time()) if rid == run_id}
        if self.busy_step is not None and self.busy_step[0] == run_id:
            avoid.add(self.busy_step[1])
        picked = await self.db.call(
            daemon_jobs.pick,
            self.identity,
            (source,),
            self.peer_keys(),
            self.config.policy,
            self.may_spill(),
            {run_id: frozenset(avoid)},
        )
        return None if picked is None else picked[1]

    async def audit_loop(self) -> None:
        while True:
            taken = self.take_ready()  # a remote step fetched ahead: replayed without touching the network
            source: RunSource
            if taken is not None:
                remote, prefetched = taken
                source, step = remote, prefetched.step
                job = functools.partial(remote.replay_prefetched, prefetched, self.config.backend, self.config.policy)
            else:
                picked = await self._pick()
                if picked is None:
                    if self.replayed_since_release:  # going idle: the last replay's freed memory goes back
                        self.replayed_since_release = False
                        await trio.to_thread.run_sync(release_replay_memory, abandon_on_cancel=True)  # type: ignore[call-arg]  # trio-typing's stubs (see pyproject)
                    await trio.sleep(IDLE_POLL)
                    continue
                source, step = picked
                job = functools.partial(source.replay, step, self.config.backend, self.config.policy)
            run_id = source.manifest.run_id
            self.busy_step = (run_id, step)
            self.replayed_since_release = True
            began = trio.current_time()
            try:
                # Abandoned on shutdown: the thread's result is dropped and the daemon stops at once.
                audits = await trio.to_thread.run_sync(job, abandon_on_cancel=True)  # type: ignore[call-arg]  # trio-typing's stubs (see pyproject)
            except InputError as exc:  # its files could not be fetched or do not fit: try other steps, then again
                self._step_failed(run_id, step, source.label, exc)
                continue
            finally:
                self.busy_step = None
            self.step_retry.succeeded((run_id, step))
            try:
                signed, own_conflicts = await self.db.call(daemon_jobs.record, self.identity, source, audits)
            except AttestationError as exc:
                self.report("refused", f"own attestation of step {step}: {exc}")
                continue
            self.progress.audited += 1
            self.progress.changed()
            verdicts = ", ".join(f"{a.subject} {a.verdict}" if a.subject == "init" else a.verdict for a in audits)
            # A finding's note (the tensors that differ, the first departing op) as verify-range prints it.
            notes = "; ".join(a.note for a in audits if a.verdict != "match" and a.note)
            took = f"{trio.current_time() - began:.2f}s"
            self.report("audited", f"step {step} of {source.label}: {verdicts} ({took}){': ' + notes if notes else ''}")
            if self.gossip.queue(run_id, signed) >= wire.MAX_BATCH:
                await self.gossip.flush_outbox()
            for own, kind in own_conflicts:
                await self.gossip.announce(own, kind)

    def _step_failed(self, run_id: bytes, step: int, label: str, exc: InputError) -> None:
        """Back off from a step whose replay could not start (a fetch failed, a full disk, no memory):
        30 s, doubling to an hour; other steps go first meanwhile. Nothing is signed about it."""
        delay = self.step_retry.failed((run_id, step), trio.current_time())
        self.report("refused", f"step {step} of {label} not replayed: {exc}; retry in {delay:.0f}s")
