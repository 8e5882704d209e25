"""Where a daemon's runs live: a directory on this disk, or a lab's web server fetched step by step.

A source gives the run's checked claims (`manifest`: an engine run's
Manifest, or a lab run's view: auditor.RunHead), a label for people, and
`replay(step, backend, policy)`: the step's audits, blocking (the daemon
calls it in a worker thread). A lab run (node.daemon.lab_source) replays
its publisher's script under the lab mode. A local run is opened once and
every step uses it. A remote run (http or https) fetches, per step, only that step's shards and
checkpoints, each piece checked against the signed manifest before it is
used or cached (run.remote.RemoteRun), within a bounded cache that evicts
least recently used pieces; a memory check then decides between in-memory
and streaming replay (`--replay auto`). The daemon fetches a remote step
ahead (`prefetch`, in a thread of the run's own, outside the replay slot)
and replays it from the prefetched view (`replay_view`), so a slow server
holds up only its own run. A fetch that fails, a full disk, a request past
its deadline or under its rate floor (run.http_guard), or a step whose files
take over `fetch_deadline` seconds in all raises InputError: the daemon
reports it, backs off from that run and goes on.

Blocking I/O: `RemoteSource(...)` (the signature and manifest), `prefetch`
and `step_view` run in worker threads, never on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from p2paudit.audit.records import StepAudit
from p2paudit.audit.remote_view import open_partial_run
from p2paudit.audit.replay import RunView
from p2paudit.errors import InputError
from p2paudit.node.assign import auditor
from p2paudit.run.cache import BlobCache
from p2paudit.run.http_guard import TransferLimits
from p2paudit.run.remote import RemoteRun

FETCH_DEADLINE_S = 3600.0  # a step whose files take longer than this to arrive is given up on (retried later)


class RunSource(Protocol):
    """What the daemon audits from: the run's checked claims, a label, and each step's replay."""

    @property
    def manifest(self) -> auditor.RunHead: ...

    @property
    def label(self) -> str: ...

    def replay(self, step: int, backend: str, policy: auditor.AuditPolicy) -> tuple[StepAudit, ...]:
        """The audits of `step` (with state 0's before step 0): blocking, for a worker thread."""
        ...

    def close(self) -> None: ...


class LocalSource:
    """A published run directory on this disk (opened, shards loaded and checked, once)."""

    def __init__(self, view: RunView) -> None:
        self.view = view
        self.manifest = view.manifest
        self.label = view.run_dir.name

    def replay(self, step: int, backend: str, policy: auditor.AuditPolicy) -> tuple[StepAudit, ...]:
        return auditor.replay_step(self.view, step, backend, policy)

    def close(self) -> None:
        pass


class _GaveUp(InputError):
    """The server did not deliver a step's files within the deadline."""


@dataclass
class Prefetched:
    """A remote step whose files are fetched and checked: the local view holding them (hard links into the
    cache, so eviction cannot take them), until `close`."""

    step: int
    run_dir: Path
    stack: ExitStack

    def close(self) -> None:
        self.stack.close()


class RemoteSource:
    """A run at an http(s) URL, fetched lazily per step into a bounded, verified cache.

    Constructing it fetches and checks the signature (against `publishers`, when given) and the manifest:
    blocking, so the daemon does it in a worker thread after it serves peers."""

    def __init__(
        self,
        url: str,
        cache: BlobCache,
        read_timeout: float = 30.0,
        fetch_deadline: float = FETCH_DEADLINE_S,
        publishers: frozenset[bytes] | None = None,
        limits: TransferLimits | None = None,
    ) -> None:
        self.url = url
        self.fetch_deadline = fetch_deadline
        self._started = 0.0
        limits = limits or TransferLimits(read_timeout=read_timeout)
        self.remote = RemoteRun(url, cache, self._on_progress, publishers=publishers, limits=limits)
        try:
            self.manifest = self.remote.manifest  # fetched and checked now (the daemon: in a worker thread)
        except BaseException:
            self.remote.__exit__(None, None, None)
            raise
        self.label = self.remote.base.path.rstrip("/").rsplit("/", 1)[-1] or str(self.remote.base.host)
        self.fetching: str | None = None  # the file being fetched now, for the status

    def _on_progress(self, path: str, done: int, total: int | None) -> None:
        self.fetching = f"{path}: {done}/{total if total is not None else '?'} bytes"
        if time.monotonic() - self._started > self.fetch_deadline:
            raise _GaveUp(f"gave up on {self.url}: step files took over {self.fetch_deadline:.0f} s (at {path})")

    @contextmanager
    def step_view(self, step: int) -> Iterator[RunView]:
        self._started = time.monotonic()
        try:
            with self.remote.local_view(step, step, mode="auto") as run_dir:
                yield open_partial_run(Path(run_dir), str(step), mode="auto")
        except OSError as exc:  # a full disk or an unwritable cache: one line, the daemon goes on
            raise InputError(f"cache for {self.url}: {exc.strerror or exc}") from None
        finally:
            self.fetching = None

    def replay(self, step: int, backend: str, policy: auditor.AuditPolicy) -> tuple[StepAudit, ...]:
        """Fetch what `step` needs and replay it (the daemon replays remote steps prefetched instead)."""
        with self.step_view(step) as view:
            return auditor.replay_step(view, step, backend, policy)

    def prefetch(self, step: int) -> Prefetched:
        """Fetch and check what replaying `step` needs, and keep it in a local view (blocking: a worker
        thread's); InputError as step_view."""
        stack = ExitStack()
        self._started = time.monotonic()
        try:
            run_dir = stack.enter_context(self.remote.local_view(step, step, mode="auto"))
        except OSError as exc:
            stack.close()
            raise InputError(f"cache for {self.url}: {exc.strerror or exc}") from None
        except BaseException:
            stack.close()
            raise
        finally:
            self.fetching = None
        return Prefetched(step, Path(run_dir), stack)

    @property
    def stats(self) -> dict[str, int]:
        s = self.remote.stats
        return {"received_bytes": s.received_bytes, "cached_files": len(s.cached)}

    def close(self) -> None:
        self.remote.__exit__(None, None, None)


def replay_view(prefetched: Prefetched, mode: str = "auto") -> RunView:
    """The RunView of a prefetched step (its files checked again as they are opened; no network)."""
    return open_partial_run(prefetched.run_dir, str(prefetched.step), mode=mode)
