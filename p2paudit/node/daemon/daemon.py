"""`p2paudit daemon`: one volunteer node: audit, sign, gossip, sync, witness, and report.

Everything that touches the network goes through `p2paudit.node.net`; what the
bytes mean is `node.wire` (and `wire.validate`), each request protocol's two ends
`node.protocols`; what to audit is `assign.auditor`. The store (SQLite) has one owner
thread (`store_owner`), fed jobs from `jobs`: no commit, fsync or scan runs on the event loop. A replay
runs in a worker thread so gossip, sync and witnessing stay responsive during
a long step; on shutdown (SIGINT, SIGTERM, --duration) its result is dropped,
so the daemon stops within seconds even mid-step, after it signs a final
checkpoint. The daemon reports by `DaemonEvent`s and writes a status snapshot
(`status.write_status`, on the store's thread) that `p2paudit status` reads.

The Daemon is made with a node already running (run.run_daemon opens it first) and holds its parts,
each made with what it needs: `audit` (daemon.audit: the next step, the replay, signing), `gossip`
(daemon.gossip: batches in, own attestations and evidence out), `peers` (daemon.peer_sync: sync and
witnessing), `fetch` (daemon.fetch: remote runs opened and fetched ahead) and `follower` (daemon.follow:
followed labs' announcements); what they share is handed to each: the report lines and the progress
(daemon.state), the step back-offs and the prefetched steps (audit and fetch).

Loops, all in one trio nursery (started by `run.run_daemon`):
- audit (audit): take a remote step fetched ahead (fetch), or pick the
  next step of a local run (auditor.next_step), replay it off-loop,
  sign and append, queue the new attestations for gossip, announce new
  conflicts on the evidence topic;
- open and prefetch (fetch): each --run URL opened after the node
  serves peers, and each remote run's next step fetched ahead in a thread of
  its own, backing off from a run whose fetches keep failing;
- flush (gossip): every second, gossip the queued attestations in as
  few batches as the limits allow (a message costs the same whatever it carries);
- sync, witness (peer_sync), discover (discover): reconcile with each connected peer
  every few seconds, have the new checkpoint cosigned, find other auditors;
- status (here): rewrite the status snapshot every second (less often when
  making it takes long), from `Daemon.live()` and the store
  (jobs.write_status calls status.snapshot).
Every loop is supervised (net.supervise): an exception is logged
with its traceback and the loop restarts after a back-off. Every back-off is a `timing.backoff.Backoff`
and everything remembered per peer, step or conflict a `timing.bounded_map.BoundedMap`, on trio's clock
(`trio.current_time()`), so tests drive the daemon's time with `trio.testing.MockClock`.
Gossip arrives through the adapter's validator (stateless checks only) and is
drained continuously into the store with append_many (gossip).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

import trio

from p2paudit.errors import InputError, NetworkError
from p2paudit.identity import Identity
from p2paudit.node import wire
from p2paudit.node.daemon import jobs as daemon_jobs
from p2paudit.node.daemon import status
from p2paudit.node.daemon.audit import SPILL_GRACE as SPILL_GRACE
from p2paudit.node.daemon.audit import Auditing
from p2paudit.node.daemon.config import DaemonConfig as DaemonConfig
from p2paudit.node.daemon.fetch import MAX_STEP_RETRIES, FetchAhead
from p2paudit.node.daemon.follow import Follower
from p2paudit.node.daemon.gossip import GossipWork, stateless_validator
from p2paudit.node.daemon.loop_monitor import LoopMonitor
from p2paudit.node.daemon.peer_sync import SYNC_INTERVAL, PeerSync
from p2paudit.node.daemon.sources import Prefetched, RemoteSource, RunSource
from p2paudit.node.daemon.state import DaemonEvent as DaemonEvent
from p2paudit.node.daemon.state import Progress, Reporter
from p2paudit.node.daemon.store_owner import StoreOwner
from p2paudit.node.net import Node, NodeEvent
from p2paudit.node.protocols import announce, settled
from p2paudit.node.timing.backoff import BackoffPolicy, Backoffs
from p2paudit.run.cache import BlobCache

logger = logging.getLogger(__name__)

STATUS_MAX_INTERVAL = 10.0  # the status file is at most this old while the daemon runs
# A step whose files could not be fetched (or that does not fit) is tried again after this, doubling to the maximum;
# a remote run whose fetches keep failing (or whose manifest cannot be had) backs off the same way.
STEP_RETRY_MIN = 30.0
STEP_RETRY_MAX = 3600.0
# Adapter events that mark the peer as a sender of bad data: gossip our stateless validator refused (the same
# checks on every honest node, so an honest forwarder never relays it) and bytes that do not decode on some
# protocol. Not here: rate_limited (buckets differ per node), validator_errors and contained (our own bugs or
# network failures, never the peer's fault).
BAN_EVENTS = ("rejected", "malformed")


class Daemon:
    """The running node's state (owned by the event loop's thread), holding its parts (module docstring);
    `node` is running when it is handed over, and the ledger is reached through `db` only."""

    def __init__(
        self,
        identity: Identity,
        config: DaemonConfig,
        db: StoreOwner,
        ledgered: daemon_jobs.Ledgered,
        emit: Callable[[DaemonEvent], None],
        node: Node,
        monitor: LoopMonitor | None = None,
    ) -> None:
        self.identity, self.config, self.db, self.node, self.monitor = identity, config, db, node, monitor
        self.report = Reporter(emit)
        self.progress = Progress()
        self.sources: list[RunSource] = list(config.runs)  # grows as followed labs announce runs
        self.network_open = True  # until node_closed: the final status shows no listener and no peers
        cache = None if config.cache_dir is None else BlobCache(config.cache_dir, config.cache_size)
        self.follower = Follower(
            config.follow,
            cache,
            config.fetch_timeout,
            db.call,
            self.add_source,
            self.report,
            config.transfer_limits(),
            config.open_lab,
        )
        self.follower.known_runs.update(s.manifest.run_id for s in self.sources)
        self.gossip = GossipWork(node, db, self.report, self.progress)
        self.peers = PeerSync(node, db, ledgered, identity, self.sources, self.report, self.progress, self.gossip)
        # Read at construction, not import: tests shorten the schedule.
        step_policy = BackoffPolicy(STEP_RETRY_MIN, STEP_RETRY_MAX)
        step_retry: Backoffs[tuple[bytes, int]] = Backoffs(step_policy, MAX_STEP_RETRIES)  # (run, step)
        ready: dict[bytes, tuple[RemoteSource, Prefetched]] = {}  # steps fetched ahead, for the audit loop
        self.audit = Auditing(
            config,
            db,
            identity,
            node,
            self.sources,
            ready,
            step_retry,
            self.peers,
            self.gossip,
            self.report,
            self.progress,
        )
        self.fetch = FetchAhead(
            config,
            cache,
            self.sources,
            self.report,
            step_retry,
            step_policy,
            self.audit.pick_step,
            self.add_source,
            self.follower.known_runs,
            node.report,
            ready,
        )
        self._ban_send, self._ban_receive = trio.open_memory_channel[tuple[str, str]](math.inf)

    # -- the node's events ----------------------------------------------------------------------------------

    def on_node_event(self, event: NodeEvent) -> None:
        peer = f"{event.peer[:16]}.." if len(event.peer) > 16 else event.peer  # "-": the node itself
        self.report("peer", f"{event.kind} {peer}{(' ' + event.detail) if event.detail else ''}")
        if event.kind in BAN_EVENTS:  # penalize is async: ban_loop does it
            self._ban_send.send_nowait((event.peer, f"bad gossip: {event.detail}"))
        if event.kind == "disconnected" and not self.peers.kept_peer(event.peer):
            self.peers.forget_peer(event.peer)  # it left, and nothing redials it

    async def event_loop(self, events: trio.MemoryReceiveChannel[NodeEvent]) -> None:
        """Take the node's events (open_node's on_event sends them on the channel), in order."""
        async for event in events:
            self.on_node_event(event)

    async def ban_loop(self) -> None:
        async for peer, reason in self._ban_receive:
            if not self.node.is_banned(peer):
                try:
                    await self.node.penalize(peer, reason)
                except InputError as exc:  # a report that names no peer id: nobody to ban
                    self.report("peer", f"cannot ban {peer[:20]!r}: {exc}")

    def node_closed(self) -> None:
        """The node has stopped (run_daemon left open_node): the status shows no listener and no peer."""
        self.network_open = False

    # -- runs -----------------------------------------------------------------------------------------------

    async def add_source(self, source: RunSource) -> None:
        """Audit one more run (announced by a lab we follow, or opened at a URL): register it, join its topic."""
        await self.db.call(daemon_jobs.register, source)
        self.sources.append(source)
        self.fetch.start_prefetch(source)
        topic = wire.run_topic(source.manifest.run_id)
        self.node.set_validator(topic, stateless_validator(topic))
        await self.node.subscribe(topic, self.gossip.on_batch)
        self.progress.changed()

    async def resume_following(self) -> None:
        """Adopt the runs announced before this start; a failure is logged, never the end of the daemon."""
        try:
            await self.follower.resume()
        except Exception:  # noqa: BLE001 (one-shot, so not under supervise: logged with its traceback)
            logger.exception("resuming the runs of followed labs failed")
            self.report("refused", "could not resume the runs of followed labs; see the log")

    async def ask_announcements(self, peer: str) -> None:
        """Learn earlier announcements of the labs we follow from `peer` (at most once a minute per peer)."""
        if not self.config.follow or self.follower.asked.alive(peer, trio.current_time()):
            return  # asked within ANNOUNCEMENTS_INTERVAL
        try:
            await self.follower.ask(announce.asker(self.node, peer), peer)
        except NetworkError:  # it does not serve announcements, or declined: it has none for us
            pass
        except InputError as exc:
            await self.peers.bad_peer("announcements answer", peer, exc)

    async def sync_loop(self) -> None:
        while True:
            for peer in list(self.node.connected_peers()):
                if self.peers.due("sync", peer):
                    await self.peers.sync_with(peer)
                await self.ask_announcements(peer)
            await trio.sleep(SYNC_INTERVAL)

    # -- status ---------------------------------------------------------------------------------------------

    def live(self) -> dict[str, Any]:
        """What only the event loop knows, for the status snapshot."""
        health = self.monitor.health() if self.monitor is not None else {}
        health.update(store_jobs=self.db.jobs_done, busiest_store_job_ms=round(self.db.busiest_job_s * 1000, 3))
        up = self.network_open
        return {
            "listen": self.node.listen_addrs() if up else [],
            "peers": self.node.connected_peers() if up else [],
            "reach": self.node.reachability().to_dict() if up else {},
            "audited": self.progress.audited,
            "received": self.progress.received,
            "events": list(self.report.events),
            "busy": self.audit.busy_step,
            "bans": self.node.bans() if up else [],
            "sync": self.peers.sync_states(),
            "health": health,
            "remote": self.fetch.remote_status(),
        }

    async def write_status(self) -> status.Status:
        return await self.db.call(
            daemon_jobs.write_status,
            self.identity,
            self.config,
            list(self.sources),
            self.live(),
            self.config.status_path,
        )

    async def covered(self) -> bool:
        """Every step of every run checked `redundancy` times here, quiet for `linger`, every peer synced since."""
        if not await self.db.call(daemon_jobs.covered, tuple(self.sources), self.config.policy):
            return False
        peers = self.peers.syncable_peers()
        quiet = self.progress.quiet_for() >= self.config.linger
        idle = (
            self.audit.busy_step is None and not self.gossip.outbox and not self.fetch.opening and not self.fetch.ready
        )
        return quiet and peers <= self.progress.synced_since_change and idle

    async def status_loop(self, cancel: trio.CancelScope) -> None:
        started = trio.current_time()
        while True:
            began = trio.current_time()
            await self.write_status()
            if self.config.duration is not None and trio.current_time() - started >= self.config.duration:
                self.report("done", f"ran for {self.config.duration:.0f}s")
                cancel.cancel()
            if self.config.stop_when_covered and await self.covered() and await self.peers_settled():
                self.report("done", "every step is covered, every peer synced and settled too")
                cancel.cancel()
            # Every second, or less often when a snapshot is slow (a big ledger): at most ~10 % of the store's time.
            await trio.sleep(min(STATUS_MAX_INTERVAL, max(1.0, 10 * (trio.current_time() - began))))

    async def serve_settled(self, peer: str, request: bytes) -> bytes:
        """Whether this node is covered by its own rule (--until-covered coordination): b"\x01" or b"\x00"."""
        return settled.answer(await self.covered())

    async def peers_settled(self) -> bool:
        """True when every connected peer says it is covered too. A node that stops only then cannot leave
        before a peer that still audits or sends: what the last of them signs reaches everyone still here."""
        return await settled.all_settled(self.node, sorted(self.peers.syncable_peers()))
