"""The daemon's remote runs: opened after the node serves peers, fetched ahead outside the replay slot.

- `open_remote(url)`: the run's signature and manifest are fetched and checked
  in a worker thread (run.remote.RemoteRun: deadline, rate floor, --publisher
  first), after the node listens; a failure is one line and a retry after a
  back-off that doubles (the step policy, a timing.backoff.Backoff), so a daemon whose lab is down, slow
  or hostile serves its peers and audits its other runs meanwhile.
- `prefetch_loop(source)`, one per remote run: pick that run's next step,
  fetch and check its files in a worker thread of its own (RemoteSource.prefetch),
  and leave the prefetched view in `ready` for the audit loop, which replays
  it without touching the network. So the one replay slot never waits on a
  server, a stalled server holds up only its own run, and a run whose fetches
  keep failing backs off (doubling, bounded by STEP_RETRY_MAX) while the
  others are audited.

Every worker thread is abandoned on shutdown (trio's abandon_on_cancel): a
fetch in progress never delays SIGINT, SIGTERM or --duration.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from p2paudit.errors import InputError
from p2paudit.node.daemon.config import DaemonConfig
from p2paudit.node.daemon.sources import Prefetched, RemoteSource, RunSource
from p2paudit.node.daemon.state import Reporter
from p2paudit.node.net import supervise
from p2paudit.node.timing.backoff import Backoff, BackoffPolicy, Backoffs
from p2paudit.run.cache import BlobCache

logger = logging.getLogger(__name__)

IDLE_POLL = 0.5
MAX_STEP_RETRIES = 4096  # steps (and remote runs) backed off from, remembered at most; the oldest are tried again
FaultReport = Callable[[str, str, str], None]  # the node's report (Node.report): what supervision caught


class FetchAhead:
    """The daemon's remote-run part. Made with the daemon's config, the store's owner, the cache, the runs
    audited (the daemon's list), the report lines, the back-offs of steps (shared with the audit loop) and
    their policy, the daemon's `add_source` (audit a run opened here), the audit part's `pick_step` (a run's
    next step, or None), the follower's `known_runs` (not adopted again), the node's report (for supervision)
    and `ready`, where prefetched steps wait for the audit part (shared)."""

    def __init__(
        self,
        config: DaemonConfig,
        cache: BlobCache | None,
        sources: list[RunSource],
        report: Reporter,
        step_retry: Backoffs[tuple[bytes, int]],
        step_policy: BackoffPolicy,
        pick_step: Callable[[RunSource], Awaitable[int | None]],
        add_source: Callable[[RunSource], Awaitable[None]],
        known_runs: set[bytes],
        fault_report: FaultReport,
        ready: dict[bytes, tuple[RemoteSource, Prefetched]],
    ) -> None:
        self.config, self.cache, self.sources, self.report = config, cache, sources, report
        self.step_retry, self.step_policy = step_retry, step_policy
        self.pick_step, self.add_source, self.known_runs, self.fault_report = (
            pick_step,
            add_source,
            known_runs,
            fault_report,
        )
        # URLs being opened (-> what is happening), runs opened here, runs backing off (run id), runs with a
        # fetch in a worker thread, prefetched steps; remote runs whose prefetch loop is still to start.
        self.opening: dict[str, str] = {url: "waiting" for url in config.urls}
        self.opened: list[RemoteSource] = []
        self.run_retry: Backoffs[bytes] = Backoffs(step_policy, MAX_STEP_RETRIES)
        self.in_flight: set[bytes] = set()
        self.ready = ready  # the audit part takes them (shared: made by the Daemon)
        self._to_start, self._starts = trio.open_memory_channel[RemoteSource](math.inf)

    # -- opening ------------------------------------------------------------------------------------------------

    async def open_remote(self, url: str) -> None:
        """Open the run at `url` (signature, publisher, manifest: a worker thread) and audit it; retried with
        a back-off until it opens."""
        backoff = Backoff(self.step_policy)
        while True:
            self.opening[url] = "signature and manifest"
            try:
                source = await trio.to_thread.run_sync(self._open_url, url, abandon_on_cancel=True)  # type: ignore[call-arg]  # trio-typing's stubs (see pyproject)
            except InputError as exc:  # the server is down, slow, hostile, or the run is not the one pinned
                why = str(exc)
            except Exception:  # noqa: BLE001 (our own bug: logged with its traceback, never the end of the daemon)
                logger.exception("opening the run at %s failed", url)
                why = "failed (a bug of ours; see the log)"
            else:
                break
            delay = backoff.failed(trio.current_time())
            self.opening[url] = f"failed, retry in {delay:.0f}s"
            self.report("refused", f"run at {url}: {why}; retry in {delay:.0f}s")
            await trio.sleep(delay)
        del self.opening[url]
        self.opened.append(source)
        if any(s.manifest.run_id == source.manifest.run_id for s in self.sources):
            self.report("refused", f"run at {url} is {source.manifest.run_id.hex()[:12]}.., already audited")
            return
        self.known_runs.add(source.manifest.run_id)
        await self.add_source(source)
        self.report("opened", f"run {source.manifest.run_id.hex()[:12]}.. at {url} ({source.manifest.num_steps} steps)")

    def _open_url(self, url: str) -> RemoteSource:
        """Blocking: the run at `url` as a source, its signature (and pinned publisher) and manifest checked."""
        if self.cache is None:
            raise InputError("no cache directory for remote runs")
        try:
            return RemoteSource(
                url,
                self.cache,
                publishers=self.config.publishers,
                limits=self.config.transfer_limits(),
                open_lab=self.config.open_lab,
            )
        except OSError as exc:  # the manifest's spool file in a full or unwritable cache directory
            raise InputError(f"cache for {url}: {exc.strerror or exc}") from None

    def start_prefetch(self, source: RunSource) -> None:
        """A remote run gets its own loop fetching its next step ahead (started by `prefetch_loops`)."""
        if isinstance(source, RemoteSource):
            self._to_start.send_nowait(source)

    async def prefetch_loops(self) -> None:
        """Run one supervised `prefetch_loop` per remote run, each started as its run is added."""
        async with trio.open_nursery() as nursery:
            async for source in self._starts:
                nursery.start_soon(supervise, functools.partial(self.prefetch_loop, source), self.fault_report)

    # -- fetching ahead -----------------------------------------------------------------------------------------

    async def prefetch_loop(self, source: RemoteSource) -> None:
        """Keep one fetched step of `source` ready for the audit loop; back off from the run when a fetch fails."""
        run_id = source.manifest.run_id
        while True:
            wait = self.run_retry.wait(run_id, trio.current_time())
            if run_id in self.ready or wait > 0:
                await trio.sleep(min(IDLE_POLL, max(0.01, wait)))
                continue
            step = await self.pick_step(source)
            if step is None:
                await trio.sleep(IDLE_POLL)
                continue
            self.in_flight.add(run_id)
            try:
                got = await trio.to_thread.run_sync(source.prefetch, step, abandon_on_cancel=True)  # type: ignore[call-arg]  # trio-typing's stubs (see pyproject)
            except InputError as exc:  # its files could not be fetched or do not fit: back off from this run
                self._fetch_failed(run_id, step, source.label, exc)
                continue
            finally:
                self.in_flight.discard(run_id)
            self.run_retry.succeeded(run_id)
            self.ready[run_id] = (source, got)

    def _fetch_failed(self, run_id: bytes, step: int, label: str, exc: InputError) -> None:
        """One line; the step backs off as a step does (its own wait, never longer than the run's: both start
        now), and the whole run doubling while its fetches keep failing (a success resets it)."""
        now = trio.current_time()
        delay = self.run_retry.failed(run_id, now)
        self.step_retry.failed((run_id, step), now)  # its own wait is never longer than the run's
        self.report("refused", f"step {step} of {label} not replayed: {exc}; retry in {delay:.0f}s")

    def remote_status(self) -> list[dict[str, Any]]:
        """The status file's "remote": each remote run (what it fetches now, bytes received, files the cache
        served), then each URL still being opened (no run id yet)."""
        runs = [
            {"run_id": s.manifest.run_id.hex(), "url": s.url, "fetching": s.fetching, **s.stats}
            for s in self.sources
            if isinstance(s, RemoteSource)
        ]
        opening = [
            {"run_id": None, "url": url, "fetching": what, "received_bytes": 0, "cached_files": 0}
            for url, what in self.opening.items()
        ]
        return runs + opening

    def release_remote(self) -> None:
        """At shutdown: drop the prefetched views, close the runs this daemon opened whose fetch is not in flight
        (an abandoned thread still holds its client; the process ends anyway)."""
        for _, prefetched in self.ready.values():
            prefetched.close()
        self.ready.clear()
        for source in self.opened:
            if source.manifest.run_id not in self.in_flight:
                source.close()
