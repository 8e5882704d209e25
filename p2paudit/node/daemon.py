"""`p2paudit daemon`: one volunteer node: audit, sign, gossip, sync, witness, and report.

Everything that touches the network goes through `libp2p_adapter`; what the
bytes mean is `wire`, `validate`, `sync` and `witness`; what to audit is
`auditor`. The store (SQLite) has one owner thread (`store_owner`), fed jobs
from `daemon_jobs`: no commit, fsync or scan runs on the event loop. A replay
runs in a worker thread so gossip, sync and witnessing stay responsive during
a long step; on shutdown (SIGINT, SIGTERM, --duration) its result is dropped,
so the daemon stops within seconds even mid-step, after it signs a final
checkpoint. The daemon reports by `DaemonEvent`s and writes a status snapshot
(`status.write_status`, on the store's thread) that `p2paudit status` reads.

Loops, all in one trio nursery:
- audit: pick the next step (auditor.next_step), replay it off-loop, sign and
  append, queue the new attestations for gossip, announce new conflicts on
  the evidence topic;
- flush: every second, gossip the queued attestations in as few batches as
  the limits allow (a message costs the same whatever it carries);
- sync: every few seconds, with each connected peer, a status handshake and
  page-proved range requests from the stored cursor (sync.SyncSession);
- witness: after the ledger grows, ask each connected peer to cosign the new
  checkpoint (C2SP tlog-witness), keeping cosignatures and refusals;
- discover: provide each run id in the DHT and dial the other providers;
- status: rewrite the status snapshot every second (less often when making it takes long).
Every loop is supervised (libp2p_adapter.supervise): an exception is logged
with its traceback and the loop restarts after a back-off.
Gossip arrives through the adapter's validator (stateless checks only) and is
drained continuously into the store with append_many.
"""

from __future__ import annotations

import functools
import logging
import math
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from ledger.cosignature import CosignatureVerifier
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.record import decode_signed
from p2paudit.attest.store import AttestationStore
from p2paudit.attest.tables import origin_for
from p2paudit.audit.records import StepAudit
from p2paudit.errors import InputError, NetworkError
from p2paudit.identity import Identity
from p2paudit.node import auditor, daemon_jobs, reconcile, status, sync, wire, witness
from p2paudit.node.announce import (
    ANNOUNCEMENTS_PROTOCOL,
    MAX_LIST_BYTES,
    MAX_LIST_REQUEST_BYTES,
    RUNS_TOPIC,
    list_refusal,
)
from p2paudit.node.follow import Follower
from p2paudit.node.libp2p_adapter import Node, NodeConfig, NodeEvent, ReachConfig, RequestFailed, open_node, supervise
from p2paudit.node.loop_monitor import LoopMonitor
from p2paudit.node.reconcile import RECONCILE_PROTOCOL
from p2paudit.node.sources import RemoteSource, RunSource
from p2paudit.node.store_owner import StoreOwner
from p2paudit.node.validate import check_evidence, check_gossip
from p2paudit.node.wire import PeerRefused, WireError
from p2paudit.run.cache import BlobCache

logger = logging.getLogger(__name__)

SYNC_INTERVAL = 3.0
# A peer in step is asked for its signed checkpoint at most this often (and whenever a sync brought something):
# with the stream's own ~750 bytes, the answer was 60 % of a quiet sync's bytes every 3 s with every peer.
CHECKPOINT_INTERVAL = 60.0
STATUS_MAX_INTERVAL = 10.0  # the status file is at most this old while the daemon runs
WITNESS_INTERVAL = 3.0
IDLE_POLL = 0.5
SPILL_GRACE = 2.0
DISCOVERY_INTERVAL = 10.0
FLUSH_INTERVAL = 1.0
MAX_SYNC_HISTORY = 256  # peers whose last sync (time, error) is remembered for the status file; the oldest go
MAX_ANNOUNCED_CONFLICTS = 100_000  # (kind, run, step, key) remembered as announced; the oldest are forgotten
# A step whose files could not be fetched (or that does not fit) is tried again after this, doubling to the maximum.
STEP_RETRY_MIN = 30.0
STEP_RETRY_MAX = 3600.0
ANNOUNCEMENTS_INTERVAL = 60.0  # how often each peer is asked for announcements of the labs we follow
# A peer that could not be reached, was too slow or declined is asked again after this, doubling to the maximum.
RETRY_MIN = 3.0
RETRY_MAX = 300.0
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
    # Announced addresses, relays (client and service), hole punching: the adapter's terms.
    reach: ReachConfig = ReachConfig()


@dataclass(frozen=True)
class DaemonEvent:
    """What the CLI shows: kind (audited, received, conflict, evidence, synced, witnessed, peer, refused, done)."""

    kind: str
    text: str


class Daemon:
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
        self.follower = Follower(config.follow, cache, config.fetch_timeout, db.call, self.add_source, self._report)
        self.follower.known_runs.update(s.manifest.run_id for s in self.sources)
        self.node: Node | None = None
        self.last_change = time.monotonic()
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
        self.announced_conflicts: dict[tuple[str, bytes, int, bytes], None] = {}  # oldest first, bounded
        self._ban_send, self._ban_receive = trio.open_memory_channel[tuple[str, str]](math.inf)
        self._retry: dict[tuple[str, str], tuple[float, float]] = {}  # (what, peer) -> (not before, back-off)
        self.sync_bytes = 0  # bytes received by sync (reconciliation, checkpoints, pages)
        self.sync_history: dict[str, tuple[float | None, str | None]] = {}  # peer -> (last ok, unix s; last error)
        self.checkpoint_asked: dict[str, float] = {}  # peer -> when we last took its checkpoint (monotonic)
        self.step_retry: dict[tuple[bytes, int], tuple[float, float]] = {}  # (run, step) -> (not before, back-off)

    # -- reporting -----------------------------------------------------------------------------------------

    def _report(self, kind: str, text: str) -> None:
        self.events = (self.events + [f"{kind}: {text}"])[-20:]
        self.emit(DaemonEvent(kind, text))

    def on_node_event(self, event: NodeEvent) -> None:
        self._report("peer", f"{event.kind} {event.peer[:16]}..{(' ' + event.detail) if event.detail else ''}")
        if event.kind in BAN_EVENTS:  # penalize is async: ban_loop does it
            self._ban_send.send_nowait((event.peer, f"bad gossip: {event.detail}"))

    async def ban_loop(self) -> None:
        async for peer, reason in self._ban_receive:
            if self.node is not None and not self.node.is_banned(peer):
                try:
                    await self.node.penalize(peer, reason)
                except InputError as exc:  # a report that names no peer id: nobody to ban
                    self._report("peer", f"cannot ban {peer[:20]!r}: {exc}")

    def _changed(self) -> None:
        self.last_change = time.monotonic()
        self.synced_since_change.clear()

    # -- gossip in ------------------------------------------------------------------------------------------

    async def on_batch(self, peer: str, data: bytes) -> None:
        """A validated batch: store what is new; announce conflicts it creates."""
        try:
            envelopes = wire.decode_batch(data).envelopes
            fresh, new_conflicts = await self.db.call(daemon_jobs.append, list(envelopes))
        except InputError as exc:  # an unknown step or run: state-dependent, judged here
            self._report("refused", f"batch from {peer[:16]}..: {exc}")
            return
        if fresh:
            self.received += fresh
            self._changed()
            self._report("received", f"{fresh} attestation(s) from {peer[:16]}..")
        for signed, kind in new_conflicts:
            await self._announce(signed, kind)

    async def on_evidence(self, peer: str, data: bytes) -> None:
        """Evidence checked from its bytes (the validator did); store the attestations it carries."""
        try:
            kind = check_evidence(data)
            view = await self.db.call(daemon_jobs.store_evidence, wire.decode_evidence(data), kind)
            if view is not None:
                self.announced_views.add(view)
        except InputError as exc:
            self._report("refused", f"evidence from {peer[:16]}..: {exc}")
            return
        self._report("evidence", f"{kind} from {peer[:16]}..")

    # -- conflicts out --------------------------------------------------------------------------------------

    async def _announce(self, signed: bytes, kind: str) -> None:
        """Publish the two signed attestations that prove a new dispute or equivocation: once per disputed step,
        once per equivocating key and step (a flood of attestations joining one dispute proves nothing new and
        must not make us gossip evidence at the flooder's rate)."""
        record = decode_signed(signed).attestation
        key = (kind, record.run_id, record.step, record.verifier if kind == "equivocation" else b"")
        if key in self.announced_conflicts:
            return
        self.announced_conflicts[key] = None
        if len(self.announced_conflicts) > MAX_ANNOUNCED_CONFLICTS:
            del self.announced_conflicts[next(iter(self.announced_conflicts))]
        found = await self.db.call(daemon_jobs.evidence_for, signed, kind)
        if found is None:
            return
        step, run_id, message = found
        self._report("conflict", f"{kind} at step {step} of run {run_id.hex()[:12]}..")
        if self.node is not None:
            await self.node.publish(wire.EVIDENCE_TOPIC, message)

    async def _announce_split_views(self) -> None:
        """Gossip each split view this ledger holds and has not announced yet."""
        for key, message in await self.db.call(daemon_jobs.split_views):
            if key in self.announced_views:
                continue
            self.announced_views.add(key)
            self._report("conflict", f"split view of {key[1]} at size {key[2]}")
            if self.node is not None:
                await self.node.publish(wire.EVIDENCE_TOPIC, message)

    # -- runs -----------------------------------------------------------------------------------------------

    async def add_source(self, source: RunSource) -> None:
        """Audit one more run (announced by a lab we follow): register it, join its topic."""
        m = source.manifest
        await self.db.call(daemon_jobs.register, source)
        self.sources.append(source)
        if self.node is not None:
            topic = wire.run_topic(m.run_id)
            self.node.set_validator(topic, stateless_validator(topic))
            await self.node.subscribe(topic, self.on_batch)
        self._changed()

    async def resume_following(self) -> None:
        """Adopt the runs announced before this start; a failure is logged, never the end of the daemon."""
        try:
            await self.follower.resume()
        except Exception:  # noqa: BLE001 (one-shot, so not under supervise: logged with its traceback)
            logger.exception("resuming the runs of followed labs failed")
            self._report("refused", "could not resume the runs of followed labs; see the log")

    async def ask_announcements(self, peer: str) -> None:
        """Learn earlier announcements of the labs we follow from `peer` (at most once a minute per peer)."""
        if not self.config.follow or time.monotonic() - self.follower.asked.get(peer, -1e9) < ANNOUNCEMENTS_INTERVAL:
            return

        async def request(data: bytes) -> bytes:
            return await self.node.request(peer, ANNOUNCEMENTS_PROTOCOL, data, max_response=MAX_LIST_BYTES)

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
        return peers <= self.synced_since_change and time.monotonic() - self.last_change >= SPILL_GRACE

    async def _pick(self) -> tuple[RunSource, int] | None:
        spill, peers = self._may_spill(), self._peer_keys()
        now = time.monotonic()
        avoid: dict[bytes, set[int]] = {}
        for (run_id, step), (until, _) in self.step_retry.items():
            if until > now:
                avoid.setdefault(run_id, set()).add(step)
        frozen = {run_id: frozenset(steps) for run_id, steps in avoid.items()}
        return await self.db.call(
            daemon_jobs.pick, self.identity, tuple(self.sources), peers, self.config.policy, spill, frozen
        )

    async def audit_loop(self) -> None:
        while True:
            picked = await self._pick()
            if picked is None:
                await trio.sleep(IDLE_POLL)
                continue
            source, step = picked
            run_id = source.manifest.run_id
            self.busy_step = (run_id, step)
            began = time.monotonic()
            try:
                # Abandoned on shutdown: the thread's result is dropped and the daemon stops at once.
                audits = await trio.to_thread.run_sync(
                    replay_from, source, step, self.config.backend, self.config.policy, abandon_on_cancel=True
                )
            except InputError as exc:  # its files could not be fetched or do not fit: try other steps, then again
                self._step_failed(run_id, step, source.label, exc)
                continue
            finally:
                self.busy_step = None
            self.step_retry.pop((run_id, step), None)
            try:
                signed, own_conflicts = await self.db.call(daemon_jobs.record, self.identity, source, audits)
            except AttestationError as exc:
                self._report("refused", f"own attestation of step {step}: {exc}")
                continue
            self.audited += 1
            self._changed()
            verdicts = ", ".join(f"{a.subject} {a.verdict}" if a.subject == "init" else a.verdict for a in audits)
            self._report("audited", f"step {step} of {source.label}: {verdicts} ({time.monotonic() - began:.2f}s)")
            self.outbox.setdefault(run_id, []).extend(signed)
            if sum(len(items) for items in self.outbox.values()) >= wire.MAX_BATCH:
                await self.flush_outbox()
            for own, kind in own_conflicts:
                await self._announce(own, kind)

    def _step_failed(self, run_id: bytes, step: int, label: str, exc: InputError) -> None:
        """Back off from a step whose replay could not start (a fetch failed, a full disk, no memory):
        30 s, doubling to an hour; other steps go first meanwhile. Nothing is signed about it."""
        delay = min(self.step_retry.get((run_id, step), (0.0, STEP_RETRY_MIN / 2))[1] * 2, STEP_RETRY_MAX)
        self.step_retry[(run_id, step)] = (time.monotonic() + delay, delay)
        self._report("refused", f"step {step} of {label} not replayed: {exc}; retry in {delay:.0f}s")

    async def flush_outbox(self) -> None:
        """Publish the waiting attestations of each run in as few batches as the limits allow."""
        pending, self.outbox = self.outbox, {}
        for run_id, signed in pending.items():
            for message in wire.batches(run_id, signed):
                if self.node is not None:
                    await self.node.publish(wire.run_topic(run_id), message)

    async def flush_loop(self) -> None:
        while True:
            await trio.sleep(FLUSH_INTERVAL)
            await self.flush_outbox()

    # -- sync -----------------------------------------------------------------------------------------------

    def _due(self, what: str, peer: str) -> bool:
        """Whether `what` (sync, witness) may be tried with `peer` now: not while its back-off runs."""
        return self._retry.get((what, peer), (0.0, 0.0))[0] <= time.monotonic()

    def _unreachable(self, what: str, peer: str, exc: NetworkError) -> None:
        """Back off from `peer` for `what`: unreachable, too slow or declined is nobody's proven fault."""
        delay = min(self._retry.get((what, peer), (0.0, RETRY_MIN / 2))[1] * 2, RETRY_MAX)
        self._retry[(what, peer)] = (time.monotonic() + delay, delay)
        self._report("peer", f"{what} with {peer[:16]}.. failed: {exc}; next try in {delay:.0f}s")

    async def _bad_peer(self, what: str, peer: str, exc: InputError) -> None:
        """The peer sent bad data (the evidence is the message): refuse it for the ban period."""
        self._report("refused", f"{what} from {peer[:16]}..: {exc}")
        if self.node is not None:
            await self.node.penalize(peer, f"bad {what}: {exc}")

    async def sync_with(self, peer: str) -> None:
        """One sync with `peer`: reconcile each run's attestations with it (each one we lack fetched once) and
        take its signed checkpoint (split views, witnessing); a peer that does not serve reconciliation is
        synced by proved pages of its log. A peer that lies (a bad page, proof, signature, answer) is banned."""
        try:
            try:
                new, conflicts = await self._reconcile_with(peer)
            except RequestFailed:  # it does not serve reconcile (or is gone: then the pages fail too)
                new, conflicts = await self._pages_from(peer)
            else:
                if new or time.monotonic() - self.checkpoint_asked.get(peer, -math.inf) >= CHECKPOINT_INTERVAL:
                    await self._checkpoint_of(peer)
        except NetworkError as exc:  # unreachable, too slow, or a refusal: back off
            self._sync_tried(peer, str(exc))
            self._unreachable("sync", peer, exc)
            return
        except InputError as exc:  # PageProofError, WireError, AttestationError, BadResponse: the peer lied
            self._sync_tried(peer, str(exc))
            await self._bad_peer("sync page", peer, exc)
            return
        self._sync_tried(peer, None)
        self._retry.pop(("sync", peer), None)
        if new:
            self.received += new
            self._changed()
            self._report("synced", f"{new} attestation(s) from {peer[:16]}..")
        self.synced_since_change.add(peer)
        for signed, kind in conflicts:
            await self._announce(signed, kind)

    def _sync_tried(self, peer: str, error: str | None) -> None:
        """Remember how the last sync with `peer` went (error None: it worked, now), for the status file."""
        last_ok = time.time() if error is None else self.sync_history.get(peer, (None, None))[0]
        self.sync_history.pop(peer, None)
        self.sync_history[peer] = (last_ok, None if error is None else error[:200])
        if len(self.sync_history) > MAX_SYNC_HISTORY:
            del self.sync_history[next(iter(self.sync_history))]

    def sync_states(self) -> list[dict[str, Any]]:
        """Per known peer (connected, or synced with before): ok, backing-off or never; when it last worked,
        when it is tried next (while backing off) and the last error, times in unix seconds."""
        connected = self.node.connected_peers() if self.node is not None else []
        banned_until = {ban["peer"]: ban["until"] for ban in self.node.bans()} if self.node is not None else {}
        now, wall, states = time.monotonic(), time.time(), []
        for peer in sorted(set(connected) | set(self.sync_history)):
            last_ok, error = self.sync_history.get(peer, (None, None))
            not_before = self._retry.get(("sync", peer), (now, 0.0))[0]
            # The last try failed: the next waits out its back-off (or is due now, when that has passed).
            state = "backing-off" if error is not None else "ok" if last_ok is not None else "never"
            next_try = max(wall, wall + not_before - now, banned_until.get(peer, wall)) if error is not None else None
            states.append({"peer": peer, "state": state, "last_ok": last_ok, "next_try": next_try, "error": error})
        return states

    async def _reconcile_with(self, peer: str) -> tuple[int, list[tuple[bytes, str]]]:
        async def ask(data: bytes) -> bytes:
            return await self.node.request(peer, RECONCILE_PROTOCOL, data, max_response=reconcile.MAX_ANSWER_BYTES)

        new, conflicts = 0, []
        for source in list(self.sources):
            m = source.manifest
            done = await reconcile.reconcile_run(ask, self.db.call, m.run_id, m.num_steps)
            new += done.new
            conflicts += done.conflicts
            self.sync_bytes += done.received_bytes
        return new, conflicts

    async def _checkpoint_of(self, peer: str) -> None:
        """The peer's signed checkpoint (status handshake): kept, so two heads of one size meet here."""
        request = wire.encode_sync_request(wire.StatusRequest())
        answer = await self.node.request(peer, wire.SYNC_PROTOCOL, request, max_response=wire.MAX_STATUS_BYTES)
        self.sync_bytes += len(answer)
        response = wire.decode_sync_response(answer)
        if isinstance(response, wire.SyncRefusal):
            raise PeerRefused(f"peer refused the status request: {response.reason[:200]}")
        if not isinstance(response, wire.StatusResponse):
            raise WireError(f"peer answered a status request with a {type(response).__name__}")
        sync.open_peer_checkpoint(response.note)  # signed by the key its origin names, or PageProofError
        await self.db.call(daemon_jobs.record_peer_note, response.note)
        self.checkpoint_asked.pop(peer, None)
        self.checkpoint_asked[peer] = time.monotonic()
        if len(self.checkpoint_asked) > MAX_SYNC_HISTORY:
            del self.checkpoint_asked[next(iter(self.checkpoint_asked))]
        await self._announce_split_views()

    async def _pages_from(self, peer: str) -> tuple[int, list[tuple[bytes, str]]]:
        """Pull the peer's log from our cursor in proved pages (sync.SyncSession)."""
        session = await self.db.call(lambda store: sync.SyncSession(store, self.ledgered.cursor))
        while (request := await self.db.call(lambda _: session.next_request())) is not None:
            response = await self.node.request(peer, wire.SYNC_PROTOCOL, request, max_response=wire.MAX_PAGE_BYTES)
            self.sync_bytes += len(response)
            handshake = session.checkpoint is None
            # Proofs, signatures and the append run on the store's thread, off the event loop.
            await self.db.call(lambda _, answer=response: session.handle_response(answer))
            if handshake:
                note = wire.decode_sync_response(response).note
                await self.db.call(daemon_jobs.record_peer_note, note)
                await self._announce_split_views()
        new = sum(applied.new for applied in session.applied)
        indices = [(i.index, i.conflict) for a in session.applied for i in a.appended if i.new and i.conflict]
        conflicts = []
        for index, kind in indices:
            conflicts.append((await self.db.call(lambda store, i=index: store.attestation(i).encoded), kind))
        return new, conflicts

    async def sync_loop(self) -> None:
        while True:
            for peer in list(self.node.connected_peers()):
                if self._due("sync", peer):
                    await self.sync_with(peer)
                await self.ask_announcements(peer)
            await trio.sleep(SYNC_INTERVAL)

    async def serve_reconcile(self, peer: str, request: bytes) -> bytes:
        return await self.db.call(reconcile.serve, request)

    async def serve_sync(self, peer: str, request: bytes) -> bytes:
        return await self.db.call(daemon_jobs.serve_sync, self.identity, request)

    # -- witness --------------------------------------------------------------------------------------------

    async def serve_witness(self, peer: str, request: bytes) -> bytes:
        response = await self.db.call(lambda _: witness.witness_checkpoint(self.ledgered.witness, request))
        await self._announce_split_views()
        return response

    async def witness_with(self, peer: str) -> None:
        size = await self.db.call(daemon_jobs.size)
        if size == 0 or self.witnessed.get(peer) == size:
            return
        old = self.witnessed.get(peer, 0)
        try:
            # The adapter admits Ed25519 peers only; a peer id that still names no key is our bug.
            cosigner = CosignatureVerifier(witness.WITNESS_NAME_PREFIX + peer, peer_public_key(peer))
            for _ in range(2):  # a size mismatch tells the size the witness holds: retry once from there
                try:
                    size, note, request = await self.db.call(daemon_jobs.witness_request, self.identity, old)
                    response = await self.node.request(peer, wire.WITNESS_PROTOCOL, request)
                    cosignature = witness.read_witness_response(note, response, cosigner)
                except witness.WitnessRefused as exc:
                    if exc.code == wire.WITNESS_OLD_SIZE_MISMATCH:
                        old = exc.size
                        continue
                    raise
                await self.db.call(daemon_jobs.record_cosignature, note, cosignature)
                self.witnessed[peer] = size
                self._retry.pop(("witness", peer), None)
                self._report("witnessed", f"{peer[:16]}.. cosigned tree size {size}")
                return
        except NetworkError as exc:  # unreachable, too slow, or the witness declined (with its code)
            self._unreachable("witness", peer, exc)
        except InputError as exc:  # a malformed answer or a cosignature that does not verify
            await self._bad_peer("witness answer", peer, exc)

    async def witness_loop(self) -> None:
        while True:
            for peer in list(self.node.connected_peers()):
                if self._due("witness", peer):
                    await self.witness_with(peer)
            await trio.sleep(WITNESS_INTERVAL)

    # -- discovery ------------------------------------------------------------------------------------------

    async def discover_loop(self) -> None:
        """Provide each run id in the DHT and dial the other providers: auditors of the same run find each
        other beyond their bootstrap lists (peer exchange covers the peers of peers)."""
        while True:
            for source in list(self.sources):
                run_id = source.manifest.run_id
                try:
                    await self.node.provide(run_id)
                    providers = await self.node.find_providers(run_id, timeout=5.0)
                except NetworkError as exc:
                    self._report("peer", f"DHT lookup of run {run_id.hex()[:12]}.. failed: {exc}")
                    continue
                connected = set(self.node.connected_peers())
                for peer, addrs in providers:
                    if peer in connected or self.node.is_banned(peer):
                        continue
                    for addr in addrs:
                        try:
                            await self.node.connect(f"{addr}/p2p/{peer}" if "/p2p/" not in addr else addr)
                            self._report("peer", f"found {peer[:16]}.. as a provider of run {run_id.hex()[:12]}..")
                            break
                        except (NetworkError, InputError):  # unreachable or a bad address: try the next
                            continue
            await trio.sleep(DISCOVERY_INTERVAL)

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
            "remote": [
                {"run_id": s.manifest.run_id.hex(), "url": s.url, "fetching": s.fetching, **s.stats}
                for s in self.sources
                if isinstance(s, RemoteSource)
            ],
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
        quiet = time.monotonic() - self.last_change >= self.config.linger
        return quiet and peers <= self.synced_since_change and self.busy_step is None and not self.outbox

    async def status_loop(self, cancel: trio.CancelScope) -> None:
        started = time.monotonic()
        while True:
            began = time.monotonic()
            await self.write_status()
            if self.config.duration is not None and time.monotonic() - started >= self.config.duration:
                self._report("done", f"ran for {self.config.duration:.0f}s")
                cancel.cancel()
            if self.config.stop_when_covered and await self.covered() and await self.peers_settled():
                self._report("done", "every step is covered, every peer synced and settled too")
                cancel.cancel()
            # Every second, or less often when a snapshot is slow (a big ledger): at most ~10 % of the store's time.
            await trio.sleep(min(STATUS_MAX_INTERVAL, max(1.0, 10 * (time.monotonic() - began))))

    async def serve_settled(self, peer: str, request: bytes) -> bytes:
        """Whether this node is covered by its own rule (--until-covered coordination): b"\x01" or b"\x00"."""
        return wire.encode_settled(await self.covered())

    async def peers_settled(self) -> bool:
        """True when every connected peer says it is covered too. A node that stops only then cannot leave
        before a peer that still audits or sends: what the last of them signs reaches everyone still here."""
        for peer in sorted(self._syncable_peers()):
            try:
                answer = await self.node.request(
                    peer, wire.SETTLED_PROTOCOL, b"", max_response=wire.MAX_SETTLED_BYTES, timeout=5.0
                )
                if not wire.decode_settled(answer):
                    return False
            except (NetworkError, InputError):
                return False
        return True


def replay_from(source: RunSource, step: int, backend: str, policy: auditor.AuditPolicy) -> tuple[StepAudit, ...]:
    """Fetch (remote runs) what `step` needs and replay it: blocking, for the worker thread."""
    with source.step_view(step) as view:
        return auditor.replay_step(view, step, backend, policy)


def stateless_validator(topic: str) -> Callable[[str, bytes], Awaitable[bool]]:
    """The adapter's validator for `topic`: True, or InputError naming the fault (check_gossip); any other
    exception is our bug, which the adapter logs and never holds against the peer.

    The checks (up to 256 signatures a batch) run in a worker thread: on the event loop a batch held it
    for 150 ms while the store's thread checked signatures of its own (docs/benchmarks.md, hostile load)."""

    async def validate(origin: str, data: bytes) -> bool:
        await trio.to_thread.run_sync(check_gossip, topic, data)
        return True

    return validate


def peer_public_key(peer: str) -> bytes:
    """The Ed25519 key of a peer id (ids of Ed25519 keys inline the key); WireError otherwise."""
    return wire.origin_public_key(wire.ORIGIN_PREFIX + peer)


@dataclass(frozen=True)
class DaemonResult:
    """How the daemon ended: its last status, and the signal that stopped it (None: --duration or covered)."""

    status: status.Status
    signal: int | None


async def _stop_on_signals(cancel: trio.CancelScope, stopped_by: list[int]) -> None:
    """SIGINT or SIGTERM: stop every loop now (a replay in progress is abandoned), then finish cleanly."""
    try:
        receiver = trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
    except (ValueError, RuntimeError):  # not the main thread (an embedding program handles signals itself)
        return
    with receiver as signals:
        async for number in signals:
            stopped_by.append(number)
            cancel.cancel()
            return


async def run_daemon(
    identity: Identity, config: DaemonConfig, emit: Callable[[DaemonEvent], None], monitor: LoopMonitor | None = None
) -> DaemonResult:
    """Run the node until SIGINT/SIGTERM, `duration` passes, or (stop_when_covered) the runs are covered.

    Whatever stops it, it stops within seconds (a replay in progress is
    abandoned), then signs a final checkpoint of its ledger and writes its
    last status; the ledger is consistent at every moment (each append is one
    transaction on the store's thread).
    """
    origin = origin_for(identity.public_key)
    async with StoreOwner(lambda: AttestationStore.open(config.ledger_path, origin)) as db:
        ledgered = await db.call(daemon_jobs.setup, identity, config.runs)
        daemon = Daemon(identity, config, db, ledgered, emit, monitor)
        stopped_by: list[int] = []
        node_config = NodeConfig(listen=config.listen, bootstrap=config.peers, mdns=config.mdns, reach=config.reach)
        async with open_node(identity, node_config, daemon.on_node_event) as node:
            daemon.node = node
            _serve(node, daemon)
            for source in config.runs:
                topic = wire.run_topic(source.manifest.run_id)
                node.set_validator(topic, stateless_validator(topic))
                await node.subscribe(topic, daemon.on_batch)
            node.set_validator(wire.EVIDENCE_TOPIC, stateless_validator(wire.EVIDENCE_TOPIC))
            await node.subscribe(wire.EVIDENCE_TOPIC, daemon.on_evidence)
            node.set_validator(RUNS_TOPIC, daemon.follower.validate)
            await node.subscribe(RUNS_TOPIC, daemon.follower.on_announcement)
            async with trio.open_nursery() as nursery:
                # Every loop supervised: an exception is logged with its traceback and the loop restarts
                # after a back-off; nothing a peer sends, and no bug of ours in one loop, ends the daemon.
                report = node._emit
                nursery.start_soon(_stop_on_signals, nursery.cancel_scope, stopped_by)
                nursery.start_soon(supervise, functools.partial(daemon.status_loop, nursery.cancel_scope), report)
                for loop in (
                    daemon.audit_loop,
                    daemon.flush_loop,
                    daemon.sync_loop,
                    daemon.witness_loop,
                    daemon.discover_loop,
                    daemon.ban_loop,
                ):
                    nursery.start_soon(supervise, loop, report)
                nursery.start_soon(daemon.resume_following)
            daemon.node = None
        with trio.CancelScope(shield=True):
            note = await db.call(daemon_jobs.checkpoint, identity)
            daemon._report("done", f"signed a final checkpoint: {note.splitlines()[1]} entries")
            final = await daemon.write_status()
        return DaemonResult(final, stopped_by[0] if stopped_by else None)


def _serve(node: Node, daemon: Daemon) -> None:
    """Register the daemon's request protocols, each with its limits and its refusal message."""
    node.set_handler(
        wire.SYNC_PROTOCOL,
        daemon.serve_sync,
        max_request=wire.MAX_SYNC_REQUEST_BYTES,
        max_response=wire.MAX_PAGE_BYTES,
        timeout=10.0,
        refuse=wire.sync_refusal,
    )
    node.set_handler(
        wire.WITNESS_PROTOCOL,
        daemon.serve_witness,
        max_request=wire.MAX_WITNESS_REQUEST_BYTES,
        max_response=wire.MAX_WITNESS_RESPONSE_BYTES,
        timeout=10.0,
        refuse=wire.witness_refusal,
    )
    node.set_handler(
        RECONCILE_PROTOCOL,
        daemon.serve_reconcile,
        max_request=reconcile.MAX_REQUEST_BYTES,
        max_response=reconcile.MAX_ANSWER_BYTES,
        timeout=10.0,
        refuse=reconcile.refusal,
    )
    node.set_handler(
        ANNOUNCEMENTS_PROTOCOL,
        daemon.follower.serve,
        max_request=MAX_LIST_REQUEST_BYTES,
        max_response=MAX_LIST_BYTES,
        timeout=10.0,
        refuse=list_refusal,
    )
    node.set_handler(
        wire.SETTLED_PROTOCOL,
        daemon.serve_settled,
        max_request=0,
        max_response=wire.MAX_SETTLED_BYTES,
        timeout=5.0,
        refuse=wire.settled_refusal,
    )
