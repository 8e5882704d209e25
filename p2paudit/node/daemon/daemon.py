"""`p2paudit daemon`: one volunteer node: audit, sign, gossip, sync, witness, and report.

Everything that touches the network goes through `p2paudit.node.net`; what the
bytes mean is `wire`, `validate`, `sync` and `witness`; what to audit is
`auditor`. The store (SQLite) has one owner thread (`store_owner`), fed jobs
from `daemon_jobs`: no commit, fsync or scan runs on the event loop. A replay
runs in a worker thread so gossip, sync and witnessing stay responsive during
a long step; on shutdown (SIGINT, SIGTERM, --duration) its result is dropped,
so the daemon stops within seconds even mid-step, after it signs a final
checkpoint. The daemon reports by `DaemonEvent`s and writes a status snapshot
(`status.write_status`, on the store's thread) that `p2paudit status` reads.

Loops, all in one trio nursery (started by `daemon_run.run_daemon`):
- audit (here): take a remote step fetched ahead (daemon_fetch), or pick the
  next step of a local run (auditor.next_step), replay it off-loop,
  sign and append, queue the new attestations for gossip, announce new
  conflicts on the evidence topic;
- open and prefetch (daemon_fetch): each --run URL opened after the node
  serves peers, and each remote run's next step fetched ahead in a thread of
  its own, backing off from a run whose fetches keep failing;
- flush (daemon_gossip): every second, gossip the queued attestations in as
  few batches as the limits allow (a message costs the same whatever it carries);
- sync, witness, discover (daemon_sync): reconcile with each connected peer
  every few seconds, have the new checkpoint cosigned, find other auditors;
- status (here): rewrite the status snapshot every second (less often when
  making it takes long), from `Daemon.live()` and the store
  (daemon_jobs.write_status calls status.snapshot).
Every loop is supervised (net.supervise): an exception is logged
with its traceback and the loop restarts after a back-off. Every back-off is a `backoff.Backoff`
and everything remembered per peer, step or conflict a `bounded_map.BoundedMap`, on trio's clock
(`trio.current_time()`), so tests drive the daemon's time with `trio.testing.MockClock`.
Gossip arrives through the adapter's validator (stateless checks only) and is
drained continuously into the store with append_many (daemon_gossip).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from p2paudit.attest.errors import AttestationError
from p2paudit.audit.records import StepAudit
from p2paudit.errors import InputError, NetworkError
from p2paudit.identity import Identity
from p2paudit.node import wire
from p2paudit.node.assign import auditor
from p2paudit.node.daemon import jobs as daemon_jobs
from p2paudit.node.daemon import status
from p2paudit.node.daemon.fetch import FetchAhead, replay_prefetched
from p2paudit.node.daemon.follow import Follower
from p2paudit.node.daemon.gossip import MAX_ANNOUNCED_CONFLICTS, GossipWork, stateless_validator
from p2paudit.node.daemon.loop_monitor import LoopMonitor
from p2paudit.node.daemon.peer_sync import (
    CHECKPOINT_INTERVAL,
    MAX_PEER_RETRIES,
    MAX_SYNC_HISTORY,
    PEER_RETRY,
    PeerSync,
    peer_public_key,
)
from p2paudit.node.daemon.sources import Prefetched, RemoteSource, RunSource
from p2paudit.node.daemon.store_owner import StoreOwner
from p2paudit.node.net import Node, NodeEvent, ReachConfig, supervise
from p2paudit.node.protocols.announce import ANNOUNCEMENTS
from p2paudit.node.timing.backoff import BackoffPolicy, Backoffs
from p2paudit.node.timing.bounded_map import BoundedMap
from p2paudit.run.cache import BlobCache
from p2paudit.run.http_guard import TransferLimits

logger = logging.getLogger(__name__)

STATUS_MAX_INTERVAL = 10.0  # the status file is at most this old while the daemon runs
IDLE_POLL = 0.5
SPILL_GRACE = 2.0
# A step whose files could not be fetched (or that does not fit) is tried again after this, doubling to the maximum;
# a remote run whose fetches keep failing (or whose manifest cannot be had) backs off the same way.
STEP_RETRY_MIN = 30.0
STEP_RETRY_MAX = 3600.0
MAX_STEP_RETRIES = 4096  # steps (and remote runs) backed off from, remembered at most; the oldest are tried again
# Adapter events that mark the peer as a sender of bad data: gossip our stateless validator refused (the same
# checks on every honest node, so an honest forwarder never relays it) and bytes that do not decode on some
# protocol. Not here: rate_limited (buckets differ per node), validator_errors and contained (our own bugs or
# network failures, never the peer's fault).
BAN_EVENTS = ("rejected", "malformed")


@dataclass(frozen=True)
class DaemonConfig:
    """What a daemon runs: its runs, addresses, peers, policy, and when it stops.

    stop_when_covered: stop once every step of every run holds `redundancy`
    checks in this node's ledger, nothing new arrived for `linger` seconds and
    every connected peer was synced since (demos and tests); otherwise run
    until cancelled or for `duration` seconds.
    """

    runs: tuple[RunSource, ...]
    ledger_path: Path
    status_path: Path
    listen: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    peers: tuple[str, ...] = ()
    backend: str = "cpu"
    policy: auditor.AuditPolicy = field(default_factory=auditor.AuditPolicy)
    duration: float | None = None
    stop_when_covered: bool = False
    linger: float = 4.0
    mdns: bool = False
    # Labs whose run announcements (RUNS_TOPIC) this node audits; their runs are fetched into the cache.
    follow: frozenset[bytes] = frozenset()
    cache_dir: Path | None = None
    cache_size: int = 16 * 1024**3
    fetch_timeout: float = 60.0
    # Remote runs (--run URL), opened after the node serves peers; their signatures must name one of
    # `publishers` (when given); their redirects may leave the run's host only with `other_hosts`.
    urls: tuple[str, ...] = ()
    publishers: frozenset[bytes] | None = None
    other_hosts: bool = False
    # Announced addresses, relays (client and service), hole punching: the adapter's terms.
    reach: ReachConfig = ReachConfig()

    def transfer_limits(self) -> TransferLimits:
        """The limits of every request of a remote run: silence and rate window `fetch_timeout`, redirects."""
        return TransferLimits(read_timeout=self.fetch_timeout, other_hosts=self.other_hosts)


@dataclass(frozen=True)
class DaemonEvent:
    """What the CLI shows: kind (audited, received, conflict, evidence, synced, witnessed, peer, refused, done)."""

    kind: str
    text: str


class Daemon(GossipWork, PeerSync, FetchAhead):
    """The running node's state (owned by the event loop's thread); its ledger is reached through `db` only."""

    def __init__(
        self,
        identity: Identity,
        config: DaemonConfig,
        db: StoreOwner,
        ledgered: daemon_jobs.Ledgered,
        emit: Callable[[DaemonEvent], None],
        monitor: LoopMonitor | None = None,
    ) -> None:
        self.identity, self.config, self.db, self.emit = identity, config, db, emit
        self.ledgered = ledgered  # the sync cursor and witness: used inside db jobs only
        self.monitor = monitor
        self.sources: list[RunSource] = list(config.runs)  # grows as followed labs announce runs
        cache = None if config.cache_dir is None else BlobCache(config.cache_dir, config.cache_size)
        self.cache = cache
        self.follower = Follower(
            config.follow, cache, config.fetch_timeout, db.call, self.add_source, self._report, config.transfer_limits()
        )
        self.follower.known_runs.update(s.manifest.run_id for s in self.sources)
        self.node: Node | None = None
        # Trio's clock; +inf until run_daemon starts it (made outside the loop, nothing has been quiet yet).
        self.last_change = math.inf
        self.synced_since_change: set[str] = set()  # peers synced since the last change here
        self.witnessed: dict[str, int] = {}  # peer -> ledger size it last cosigned
        self.audited = 0
        self.received = 0
        self.events: list[str] = []
        self.busy_step: tuple[bytes, int] | None = None
        # Own attestations wait here up to FLUSH_INTERVAL, so that one gossip message carries many of them:
        # a message costs ~3 ms per copy per node whatever it holds (docs/benchmarks.md, Network).
        self.outbox: dict[bytes, list[bytes]] = {}
        self.announced_views: set[tuple[str, str, int]] = set()  # split views (vkey, origin, size) gossiped
        self.announced_conflicts: BoundedMap[tuple[str, bytes, int, bytes], None] = BoundedMap(MAX_ANNOUNCED_CONFLICTS)
        self._ban_send, self._ban_receive = trio.open_memory_channel[tuple[str, str]](math.inf)
        self._retry: Backoffs[tuple[str, str]] = Backoffs(PEER_RETRY, MAX_PEER_RETRIES)  # (what, peer)
        self.sync_bytes = 0  # bytes received by sync (reconciliation, checkpoints, pages)
        # peer -> (last ok, unix s; last error); peer -> None, over CHECKPOINT_INTERVAL after we took its checkpoint.
        self.sync_history: BoundedMap[str, tuple[float | None, str | None]] = BoundedMap(MAX_SYNC_HISTORY)
        self.checkpoint_asked: BoundedMap[str, None] = BoundedMap(MAX_SYNC_HISTORY, max_age=CHECKPOINT_INTERVAL)
        # Read at construction, not import: tests shorten the schedule.
        self.step_policy = BackoffPolicy(STEP_RETRY_MIN, STEP_RETRY_MAX)
        self.step_retry: Backoffs[tuple[bytes, int]] = Backoffs(self.step_policy, MAX_STEP_RETRIES)  # (run, step)
        # Remote runs (daemon_fetch): URLs being opened (-> what is happening), runs opened here, runs backing
        # off (run id), runs with a fetch in a worker thread, prefetched steps.
        self.opening: dict[str, str] = {url: "waiting" for url in config.urls}
        self.opened: list[RemoteSource] = []
        self.run_retry: Backoffs[bytes] = Backoffs(self.step_policy, MAX_STEP_RETRIES)
        self.in_flight: set[bytes] = set()
        self.ready: dict[bytes, tuple[RunSource, Prefetched]] = {}
        self.nursery: trio.Nursery | None = None  # set by run_daemon: where prefetch loops start

    # -- reporting -----------------------------------------------------------------------------------------

    def _report(self, kind: str, text: str) -> None:
        self.events = (self.events + [f"{kind}: {text}"])[-20:]
        self.emit(DaemonEvent(kind, text))

    def on_node_event(self, event: NodeEvent) -> None:
        peer = f"{event.peer[:16]}.." if len(event.peer) > 16 else event.peer  # "-": the node itself
        self._report("peer", f"{event.kind} {peer}{(' ' + event.detail) if event.detail else ''}")
        if event.kind in BAN_EVENTS:  # penalize is async: ban_loop does it
            self._ban_send.send_nowait((event.peer, f"bad gossip: {event.detail}"))
        if event.kind == "disconnected" and self.node is not None and not self.kept_peer(event.peer):
            self.forget_peer(event.peer)  # it left, and nothing redials it

    async def ban_loop(self) -> None:
        async for peer, reason in self._ban_receive:
            if self.node is not None and not self.node.is_banned(peer):
                try:
                    await self.node.penalize(peer, reason)
                except InputError as exc:  # a report that names no peer id: nobody to ban
                    self._report("peer", f"cannot ban {peer[:20]!r}: {exc}")

    def _changed(self) -> None:
        self.last_change = trio.current_time()
        self.synced_since_change.clear()

    # -- runs -----------------------------------------------------------------------------------------------

    async def add_source(self, source: RunSource) -> None:
        """Audit one more run (announced by a lab we follow): register it, join its topic."""
        m = source.manifest
        await self.db.call(daemon_jobs.register, source)
        self.sources.append(source)
        self.start_prefetch(source)
        if self.node is not None:
            topic = wire.run_topic(m.run_id)
            self.node.set_validator(topic, stateless_validator(topic))
            await self.node.subscribe(topic, self.on_batch)
        self._changed()

    def start_prefetch(self, source: RunSource) -> None:
        """A remote run gets its own loop fetching its next step ahead (supervised, in the daemon's nursery)."""
        if isinstance(source, RemoteSource) and self.nursery is not None:
            self.nursery.start_soon(supervise, functools.partial(self.prefetch_loop, source), self.node_report)

    def node_report(self, kind: str, peer: str, detail: str) -> None:
        if self.node is not None:
            self.node.report(kind, peer, detail)

    async def resume_following(self) -> None:
        """Adopt the runs announced before this start; a failure is logged, never the end of the daemon."""
        try:
            await self.follower.resume()
        except Exception:  # noqa: BLE001 (one-shot, so not under supervise: logged with its traceback)
            logger.exception("resuming the runs of followed labs failed")
            self._report("refused", "could not resume the runs of followed labs; see the log")

    async def ask_announcements(self, peer: str) -> None:
        """Learn earlier announcements of the labs we follow from `peer` (at most once a minute per peer)."""
        if not self.config.follow or self.follower.asked.alive(peer, trio.current_time()):
            return  # asked within ANNOUNCEMENTS_INTERVAL

        async def request(data: bytes) -> bytes:
            return await self.node.ask(peer, ANNOUNCEMENTS, data)

        try:
            await self.follower.ask(request, peer)
        except NetworkError:  # it does not serve announcements, or declined: it has none for us
            pass
        except InputError as exc:
            await self._bad_peer("announcements answer", peer, exc)

    # -- audit ----------------------------------------------------------------------------------------------

    def _peer_keys(self) -> list[bytes]:
        keys = []
        for peer in self.node.connected_peers() if self.node is not None else []:
            try:
                keys.append(peer_public_key(peer))
            except InputError:
                continue
        return keys

    def _syncable_peers(self) -> set[str]:
        """Connected peers we can learn from: not those whose sync fails or is declined (backing off), so a peer
        that does not serve sync (another implementation, a light client) holds back neither spill-over nor
        --until-covered."""
        peers = set(self.node.connected_peers()) if self.node is not None else set()
        return {peer for peer in peers if self._due("sync", peer) or peer in self.synced_since_change}

    def _may_spill(self) -> bool:
        """Spill over to unassigned steps only when every peer we can sync with was synced since the last change
        and nothing changed for SPILL_GRACE seconds: what peers already checked is then known here."""
        peers = self._syncable_peers()
        return peers <= self.synced_since_change and trio.current_time() - self.last_change >= SPILL_GRACE

    async def _pick(self) -> tuple[RunSource, int] | None:
        spill, peers = self._may_spill(), self._peer_keys()
        avoid: dict[bytes, set[int]] = {}
        for run_id, step in self.step_retry.waiting(trio.current_time()):
            avoid.setdefault(run_id, set()).add(step)
        frozen = {run_id: frozenset(steps) for run_id, steps in avoid.items()}
        local = tuple(s for s in self.sources if not isinstance(s, RemoteSource))  # remote ones: fetched ahead
        return await self.db.call(daemon_jobs.pick, self.identity, local, peers, self.config.policy, spill, frozen)

    async def audit_loop(self) -> None:
        while True:
            taken = self.take_ready()  # a remote step fetched ahead: replayed without touching the network
            if taken is not None:
                source, prefetched = taken
                step = prefetched.step
                job = functools.partial(replay_prefetched, prefetched, self.config.backend, self.config.policy)
            else:
                picked = await self._pick()
                if picked is None:
                    await trio.sleep(IDLE_POLL)
                    continue
                source, step = picked
                job = functools.partial(replay_from, source, step, self.config.backend, self.config.policy)
            run_id = source.manifest.run_id
            self.busy_step = (run_id, step)
            began = trio.current_time()
            try:
                # Abandoned on shutdown: the thread's result is dropped and the daemon stops at once.
                audits = await trio.to_thread.run_sync(job, abandon_on_cancel=True)
            except InputError as exc:  # its files could not be fetched or do not fit: try other steps, then again
                self._step_failed(run_id, step, source.label, exc)
                continue
            finally:
                self.busy_step = None
            self.step_retry.succeeded((run_id, step))
            try:
                signed, own_conflicts = await self.db.call(daemon_jobs.record, self.identity, source, audits)
            except AttestationError as exc:
                self._report("refused", f"own attestation of step {step}: {exc}")
                continue
            self.audited += 1
            self._changed()
            verdicts = ", ".join(f"{a.subject} {a.verdict}" if a.subject == "init" else a.verdict for a in audits)
            self._report("audited", f"step {step} of {source.label}: {verdicts} ({trio.current_time() - began:.2f}s)")
            self.outbox.setdefault(run_id, []).extend(signed)
            if sum(len(items) for items in self.outbox.values()) >= wire.MAX_BATCH:
                await self.flush_outbox()
            for own, kind in own_conflicts:
                await self._announce(own, kind)

    def _step_failed(self, run_id: bytes, step: int, label: str, exc: InputError) -> None:
        """Back off from a step whose replay could not start (a fetch failed, a full disk, no memory):
        30 s, doubling to an hour; other steps go first meanwhile. Nothing is signed about it."""
        delay = self.step_retry.failed((run_id, step), trio.current_time())
        self._report("refused", f"step {step} of {label} not replayed: {exc}; retry in {delay:.0f}s")

    # -- status ---------------------------------------------------------------------------------------------

    def live(self) -> dict[str, Any]:
        """What only the event loop knows, for the status snapshot."""
        health = self.monitor.health() if self.monitor is not None else {}
        health.update(store_jobs=self.db.jobs_done, busiest_store_job_ms=round(self.db.busiest_job_s * 1000, 3))
        return {
            "listen": self.node.listen_addrs() if self.node is not None else [],
            "peers": self.node.connected_peers() if self.node is not None else [],
            "reach": self.node.reachability().to_dict() if self.node is not None else {},
            "audited": self.audited,
            "received": self.received,
            "events": list(self.events),
            "busy": self.busy_step,
            "bans": self.node.bans() if self.node is not None else [],
            "sync": self.sync_states(),
            "health": health,
            "remote": self.remote_status(),
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
        peers = self._syncable_peers()
        quiet = trio.current_time() - self.last_change >= self.config.linger
        settled = self.busy_step is None and not self.outbox and not self.opening and not self.ready
        return quiet and peers <= self.synced_since_change and settled

    async def status_loop(self, cancel: trio.CancelScope) -> None:
        started = trio.current_time()
        while True:
            began = trio.current_time()
            await self.write_status()
            if self.config.duration is not None and trio.current_time() - started >= self.config.duration:
                self._report("done", f"ran for {self.config.duration:.0f}s")
                cancel.cancel()
            if self.config.stop_when_covered and await self.covered() and await self.peers_settled():
                self._report("done", "every step is covered, every peer synced and settled too")
                cancel.cancel()
            # Every second, or less often when a snapshot is slow (a big ledger): at most ~10 % of the store's time.
            await trio.sleep(min(STATUS_MAX_INTERVAL, max(1.0, 10 * (trio.current_time() - began))))

    async def serve_settled(self, peer: str, request: bytes) -> bytes:
        """Whether this node is covered by its own rule (--until-covered coordination): b"\x01" or b"\x00"."""
        return wire.encode_settled(await self.covered())

    async def peers_settled(self) -> bool:
        """True when every connected peer says it is covered too. A node that stops only then cannot leave
        before a peer that still audits or sends: what the last of them signs reaches everyone still here."""
        for peer in sorted(self._syncable_peers()):
            try:
                answer = await self.node.ask(peer, wire.SETTLED, b"")
                if not wire.decode_settled(answer):
                    return False
            except (NetworkError, InputError):
                return False
        return True


def replay_from(source: RunSource, step: int, backend: str, policy: auditor.AuditPolicy) -> tuple[StepAudit, ...]:
    """Fetch (remote runs) what `step` needs and replay it: blocking, for the worker thread."""
    with source.step_view(step) as view:
        return auditor.replay_step(view, step, backend, policy)
