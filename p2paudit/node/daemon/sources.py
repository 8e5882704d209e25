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
and replays it from the prefetched view (`replay_prefetched`), so a slow server
holds up only its own run. A lab run behind a URL is a remote run whose
manifest is a lab run's: taken only with the CLI's lab opener (--run-lab-code),
its step's files fetched by run.remote_lab and replayed under the lab mode. A fetch that fails, a full disk, a request past
its deadline or under its rate floor (run.http_guard), or a step whose files
take over `fetch_deadline` seconds in all raises InputError: the daemon
reports it, backs off from that run and goes on.

Blocking I/O: `RemoteSource(...)` (the signature and manifest), `prefetch`,
`replay` and `replay_prefetched` run in worker threads, never on the event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
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

RUN_LAB_CODE_FLAG = "--run-lab-code"


def no_opt_in(where: object) -> str:
    """Why a lab run at `where` is not audited without the opt-in (one line)."""
    return (
        f"{where} is a lab run: auditing it runs its publisher's script on this machine (sandboxed); "
        f"pass {RUN_LAB_CODE_FLAG} to allow it (for publishers you would let run code here)"
    )


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


class RemoteLab(Protocol):
    """A lab run behind a URL, as a RemoteSource's lab part (node.daemon.lab_source.RemoteLab): its checked
    manifest, the local view of the checked files a step replays from, and that step's lab replay."""

    @property
    def manifest(self) -> auditor.RunHead: ...

    def local_view(self, steps: range) -> AbstractContextManager[Path]: ...

    def replay(self, run_dir: Path, step: int, label: str, policy: auditor.AuditPolicy) -> tuple[StepAudit, ...]: ...


# How a daemon that audits lab runs (--run-lab-code) opens one behind a URL, given its RemoteRun (signature,
# publisher and manifest fetched): node.daemon.lab_source.open_remote_lab, handed in by the CLI so that
# torch is imported only where lab runs are audited. None: a lab run is refused.
LabOpener = Callable[[RemoteRun], RemoteLab]


class RemoteSource:
    """A run at an http(s) URL, fetched lazily per step into a bounded, verified cache.

    Constructing it fetches and checks the signature (against `publishers`, when given) and the manifest:
    blocking, so the daemon does it in a worker thread after it serves peers. A lab run's manifest is
    taken only with `open_lab` (its replays run the publisher's script here), and its steps replay
    under the lab mode; without it, it is refused in one line."""

    def __init__(
        self,
        url: str,
        cache: BlobCache,
        read_timeout: float = 30.0,
        fetch_deadline: float = FETCH_DEADLINE_S,
        publishers: frozenset[bytes] | None = None,
        limits: TransferLimits | None = None,
        open_lab: LabOpener | None = None,
    ) -> None:
        self.url = url
        self.fetch_deadline = fetch_deadline
        self._started = 0.0
        limits = limits or TransferLimits(read_timeout=read_timeout)
        self.remote = RemoteRun(url, cache, self._on_progress, publishers=publishers, limits=limits)
        self.lab: RemoteLab | None = None
        try:  # fetched and checked now (the daemon: in a worker thread)
            if self.remote.signed_as_lab():
                if open_lab is None:
                    raise InputError(no_opt_in(self.remote.base))
                self.lab = open_lab(self.remote)
            self.manifest: auditor.RunHead = self.remote.manifest if self.lab is None else self.lab.manifest
        except BaseException:
            self.remote.__exit__(None, None, None)
            raise
        self.label = self.remote.base.path.rstrip("/").rsplit("/", 1)[-1] or str(self.remote.base.host)
        self.fetching: str | None = None  # the file being fetched now, for the status

    def _on_progress(self, path: str, done: int, total: int | None) -> None:
        self.fetching = f"{path}: {done}/{total if total is not None else '?'} bytes"
        if time.monotonic() - self._started > self.fetch_deadline:
            raise _GaveUp(f"gave up on {self.url}: step files took over {self.fetch_deadline:.0f} s (at {path})")

    def _local_view(self, step: int) -> AbstractContextManager[Path]:
        """A local run directory of the checked files replaying `step` needs (removed on exit)."""
        if self.lab is not None:
            return self.lab.local_view(range(step, step + 1))
        return self.remote.local_view(step, step, mode="auto")

    def replay(self, step: int, backend: str, policy: auditor.AuditPolicy) -> tuple[StepAudit, ...]:
        """Fetch what `step` needs and replay it (the daemon replays remote steps prefetched instead)."""
        prefetched = self.prefetch(step)
        return self.replay_prefetched(prefetched, backend, policy)

    def replay_prefetched(
        self, prefetched: Prefetched, backend: str, policy: auditor.AuditPolicy
    ) -> tuple[StepAudit, ...]:
        """Replay a step fetched ahead from its view (no network), then drop the view: blocking, for a
        worker thread. A lab step replays under the lab mode (RemoteLab.replay)."""
        try:
            if self.lab is not None:
                return self.lab.replay(prefetched.run_dir, prefetched.step, self.label, policy)
            return auditor.replay_step(replay_view(prefetched), prefetched.step, backend, policy)
        finally:
            prefetched.close()

    def prefetch(self, step: int) -> Prefetched:
        """Fetch and check what replaying `step` needs, and keep it in a local view (blocking: a worker
        thread's); InputError (one line) when a file cannot be fetched or is not the manifest's, the
        cache's disk is full, or the step's files take over `fetch_deadline` seconds."""
        stack = ExitStack()
        self._started = time.monotonic()
        try:
            run_dir = stack.enter_context(self._local_view(step))
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
