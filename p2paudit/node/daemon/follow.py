"""Following labs: keep the announcements of followed keys, adopt their runs, and learn earlier ones from peers.

`AnnouncementStore` is an append-only table in the node's ledger file (used
on the store's owner thread only): the exact signed bytes of every
announcement by a followed key, once each. `Follower` is the daemon's side:
the gossip validator of RUNS_TOPIC, what to do with an announcement, the
ANNOUNCEMENTS_PROTOCOL server and client, and adopting an announced run (its
manifest fetched from the URLs in turn and checked against the announcement
in a worker thread; a failure is one line and a retry after a back-off).

Announcements by keys a node does not follow are neither stored nor
forwarded beyond a small bound: the validator lets FORWARD_BURST of them
through, refilled at FORWARD_RATE per second (so a network where followers
of a lab are not neighbours still carries its announcements), and ignores
the rest without blaming the forwarder.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import trio

from p2paudit.attest.store import AttestationStore
from p2paudit.errors import InputError
from p2paudit.node.daemon.sources import LabOpener, RemoteSource, RunSource
from p2paudit.node.net import IGNORE, TokenBucket
from p2paudit.node.protocols.announce import (
    MAX_LISTED,
    Announcement,
    check_manifest,
    decode_announcement,
    decode_list,
    decode_list_request,
    encode_list,
    encode_list_request,
)
from p2paudit.node.protocols.reconcile import StoreCall
from p2paudit.node.timing.backoff import BackoffPolicy, Backoffs
from p2paudit.node.timing.bounded_map import BoundedMap
from p2paudit.run.cache import BlobCache
from p2paudit.run.http_guard import TransferLimits

logger = logging.getLogger(__name__)

FORWARD_RATE = 0.2  # announcements by keys not followed, per second, that this node still forwards
FORWARD_BURST = 10.0
ADOPT_RETRY_MIN = 30.0
ADOPT_RETRY_MAX = 3600.0
ADOPT_RETRY = BackoffPolicy(ADOPT_RETRY_MIN, ADOPT_RETRY_MAX)
MAX_ADOPT_RETRIES = 1024  # announced runs backed off from, remembered at most (the oldest are tried again)
ANNOUNCEMENTS_INTERVAL = 60.0  # how often each peer is asked for announcements of the labs we follow
MAX_ASKED = 1024  # peers remembered as asked within the interval (the oldest may be asked again sooner)


class AnnouncementStore:
    """Announcements of followed keys: append-only rows beside the ledger (the owner thread's connection)."""

    DDL = (
        "CREATE TABLE IF NOT EXISTS node_announcements (id INTEGER PRIMARY KEY, publisher BLOB NOT NULL, "
        "run_id BLOB NOT NULL, data BLOB NOT NULL UNIQUE, received_at TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS node_announcements_by_publisher ON node_announcements (publisher, id)",
        "CREATE TRIGGER IF NOT EXISTS node_announcements_no_update BEFORE UPDATE ON node_announcements "
        "BEGIN SELECT RAISE(ABORT, 'node_announcements is append-only: UPDATE refused'); END",
        "CREATE TRIGGER IF NOT EXISTS node_announcements_no_delete BEFORE DELETE ON node_announcements "
        "BEGIN SELECT RAISE(ABORT, 'node_announcements is append-only: DELETE refused'); END",
    )

    def __init__(self, store: AttestationStore) -> None:
        self.store = store
        with store.ledger.transaction() as tx:
            for statement in self.DDL:
                tx.conn.execute(statement)

    def add(self, a: Announcement, data: bytes) -> bool:
        """Keep `data` (a checked announcement); False if it was already held."""
        with self.store.ledger.transaction() as tx:
            if tx.conn.execute("SELECT 1 FROM node_announcements WHERE data = ?", (data,)).fetchone():
                return False
            now = datetime.now(UTC).isoformat(timespec="seconds")
            tx.conn.execute(
                "INSERT INTO node_announcements (publisher, run_id, data, received_at) VALUES (?, ?, ?, ?)",
                (a.publisher, a.run_id, data, now),
            )
        return True

    def held(self, publishers: list[bytes]) -> list[bytes]:
        """The newest MAX_LISTED announcements by these keys, oldest first."""
        marks = ",".join("?" * len(publishers))
        rows = self.store.conn.execute(
            f"SELECT data FROM node_announcements WHERE publisher IN ({marks}) ORDER BY id DESC LIMIT ?",
            (*publishers, MAX_LISTED),
        ).fetchall()
        return [bytes(row[0]) for row in reversed(rows)]


class Follower:
    """Which keys this daemon follows, and what it does with their announcements.

    `call` runs a job on the store's owner thread (StoreOwner.call); `adopt_run` is awaited with a new
    RunSource once an announced run's manifest checks out; `report` tells the daemon's event lines.
    """

    def __init__(
        self,
        follow: frozenset[bytes],
        cache: BlobCache | None,
        fetch_timeout: float,
        call: StoreCall,
        adopt_run: Callable[[RunSource], Awaitable[None]],
        report: Callable[[str, str], None],
        limits: TransferLimits | None = None,
        open_lab: LabOpener | None = None,
    ) -> None:
        self.follow = follow
        self.limits = limits
        self.open_lab = open_lab  # an announced lab run is audited only with it (node.daemon.sources)
        self.cache = cache
        self.fetch_timeout = fetch_timeout
        self.call = call
        self.adopt_run = adopt_run
        self.report = report
        self.known_runs: set[bytes] = set()  # runs audited already (given at start, or adopted)
        self._bucket = TokenBucket(FORWARD_RATE, FORWARD_BURST)
        self._retry: Backoffs[bytes] = Backoffs(ADOPT_RETRY, MAX_ADOPT_RETRIES)  # run id
        # peer -> None while we asked it within ANNOUNCEMENTS_INTERVAL (trio's clock)
        self.asked: BoundedMap[str, None] = BoundedMap(MAX_ASKED, max_age=ANNOUNCEMENTS_INTERVAL)

    # -- gossip ----------------------------------------------------------------------------------------

    def validate(self, origin: str, data: bytes) -> bool | object:
        """RUNS_TOPIC validator: a bad announcement raises (the forwarder is blamed); one by a key not followed
        is forwarded within a small bound, then ignored."""
        a = decode_announcement(data)
        if a.publisher in self.follow:
            return True
        return True if self._bucket.take() else IGNORE

    async def on_announcement(self, peer: str, data: bytes) -> None:
        a = decode_announcement(data)
        if a.publisher not in self.follow:
            return
        if await self.call(lambda store: AnnouncementStore(store).add(a, data)):
            self.report("announced", f"run {a.run_id.hex()[:12]}.. by {a.publisher.hex()[:12]}.. at {a.urls[0][:80]}")
        await self.consider(a)

    async def resume(self) -> None:
        """Adopt the runs announced by followed keys before this start (kept in the ledger file)."""
        if not self.follow:
            return
        held = await self.call(lambda store: AnnouncementStore(store).held(sorted(self.follow)))
        for data in held:
            await self.consider(decode_announcement(data))

    async def consider(self, a: Announcement) -> None:
        """Start auditing an announced run unless it is audited already or backing off."""
        if a.run_id in self.known_runs:
            return
        if not self._retry.ready(a.run_id, trio.current_time()):
            return
        try:
            source = await trio.to_thread.run_sync(self._open, a, abandon_on_cancel=True)  # type: ignore[call-arg]  # trio-typing's stubs (see pyproject)
        except InputError as exc:  # the server is down, or the run is not what was announced
            delay = self._retry.failed(a.run_id, trio.current_time())
            self.report("refused", f"announced run {a.run_id.hex()[:12]}..: {exc}; retry in {delay:.0f}s")
            return
        self._retry.succeeded(a.run_id)
        self.known_runs.add(a.run_id)
        await self.adopt_run(source)
        self.report("following", f"auditing run {a.run_id.hex()[:12]}.. announced by {a.publisher.hex()[:12]}..")

    def _open(self, a: Announcement) -> RunSource:
        """The announced run as a source (blocking: manifest fetched and checked); InputError if none works."""
        if self.cache is None:
            raise InputError("no cache for remote runs")
        errors = []
        for url in a.urls:
            try:
                # The announcement names its publisher: pinned, so another key's signature is refused before
                # the manifest is fetched.
                source = RemoteSource(
                    url,
                    self.cache,
                    read_timeout=self.fetch_timeout,
                    publishers=frozenset([a.publisher]),
                    limits=self.limits,
                    open_lab=self.open_lab,
                )
            except InputError as exc:
                errors.append(str(exc))
                continue
            try:
                check_manifest(a, source.manifest)
            except InputError:
                source.close()
                raise
            return source
        raise InputError(f"no URL of the announcement answered: {'; '.join(errors)[:300]}")

    # -- request / response -----------------------------------------------------------------------------

    async def serve(self, peer: str, request: bytes) -> bytes:
        wanted = decode_list_request(request)
        return encode_list(await self.call(lambda store: AnnouncementStore(store).held(wanted)))

    async def ask(self, request_fn: Callable[[bytes], Awaitable[bytes]], peer: str) -> None:
        """Ask `peer` for the announcements of the keys we follow (a node that joins later learns them so).
        NetworkError: unreachable or declined; InputError: a bad answer (the caller bans)."""
        if not self.follow:
            return
        self.asked.put(peer, None, trio.current_time())
        answer = await request_fn(encode_list_request(sorted(self.follow)[:64]))
        for data in decode_list(answer):
            await self.on_announcement(peer, data)
