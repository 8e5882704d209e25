"""The one thread that owns the daemon's SQLite connection; the event loop hands it jobs.

SQLite commits with fsync (synchronous=FULL) and the attestation store checks
signatures as it appends, so neither may run on the network's event loop: a
gossip flood would stall every peer's stream for the length of a commit. The
store is opened, used and closed in one worker thread (sqlite3's
check_same_thread stays on, so any use from another thread raises); the loop
sends it jobs through a bounded queue and awaits their results.

A job is `fn(store, *args)`. Jobs run one at a time in the order sent. A
cancelled caller stops waiting but its job still runs to its end (a job is a
whole transaction or none); its result is dropped. When the queue is full the
caller waits (back-pressure on whoever floods), the loop stays free.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar, TypeVarTuple, Unpack

import trio

from p2paudit.attest.store import AttestationStore
from p2paudit.errors import InternalError

logger = logging.getLogger(__name__)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
QUEUE_SIZE = 256
_FULL_WAIT = 0.005


class StoreOwner:
    """Open with `async with StoreOwner(opener) as owner:`; then `await owner.call(fn, *args)`."""

    def __init__(self, opener: Callable[[], AttestationStore], queue_size: int = QUEUE_SIZE) -> None:
        self._opener = opener
        self._jobs: queue.Queue[Callable[[AttestationStore], None] | None] = queue.Queue(queue_size)  # None: stop
        self._thread: threading.Thread | None = None
        self.jobs_done = 0
        self.busiest_job_s = 0.0  # the longest job so far (what a flood costs the owner, not the loop)

    async def __aenter__(self) -> StoreOwner:
        token = trio.lowlevel.current_trio_token()
        opened = trio.Event()
        failure: list[BaseException] = []

        def signal_opened(error: BaseException | None) -> None:
            if error is not None:
                failure.append(error)
            token.run_sync_soon(opened.set)

        self._thread = threading.Thread(target=self._serve, args=(signal_opened,), name="p2paudit-store", daemon=True)
        self._thread.start()
        await opened.wait()
        if failure:
            raise failure[0]
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Finish the queued jobs, close the store, and join the thread (shielded: the file is left consistent)."""
        with trio.CancelScope(shield=True):
            while True:
                try:
                    self._jobs.put_nowait(None)
                    break
                except queue.Full:
                    await trio.sleep(_FULL_WAIT)
            if self._thread is not None:
                await trio.to_thread.run_sync(self._thread.join)

    def _serve(self, signal_opened: Callable[[BaseException | None], None]) -> None:
        try:
            store = self._opener()
        except BaseException as error:  # noqa: BLE001 (handed to the opener's caller)
            signal_opened(error)
            return
        signal_opened(None)
        try:
            while (job := self._jobs.get()) is not None:
                began = time.monotonic()
                job(store)
                self.jobs_done += 1
                self.busiest_job_s = max(self.busiest_job_s, time.monotonic() - began)
        finally:
            store.close()

    async def call(self, fn: Callable[[AttestationStore, Unpack[Ts]], T], *args: *Ts) -> T:
        """Run fn(store, *args) on the owner thread and return its result (or raise its exception)."""
        if self._thread is None or not self._thread.is_alive():
            raise InternalError("the store's owner thread is not running")
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        value: list[T] = []
        failure: list[BaseException] = []

        def job(store: AttestationStore) -> None:
            try:
                value.append(fn(store, *args))
            except BaseException as error:  # noqa: BLE001 (handed to the caller)
                failure.append(error)
            try:
                token.run_sync_soon(done.set)
            except trio.RunFinishedError:  # the loop is gone: nobody waits for this result
                pass

        while True:
            try:
                self._jobs.put_nowait(job)
                break
            except queue.Full:
                await trio.sleep(_FULL_WAIT)
        await done.wait()
        if failure:
            raise failure[0]
        return value[0]
