"""The steps this process is replaying and how far each has got: the auditor's replay reports into `REPLAYS`
from its worker thread, the status snapshot (node.status, on the store's thread) reads it as busy.progress.

A module of its own, light to import: `p2paudit status` and the explorer read status files without loading
the replay.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from p2paudit.run.progress_meter import ProgressHook, ProgressMeter, StepProgress


class ReplayBoard:
    """The steps this process is replaying, each with its progress meter: the replay's worker thread reports
    through `watching`'s hook, the status writer (another thread) reads `progress` (node.status busy.progress)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._meters: dict[tuple[bytes, int], ProgressMeter] = {}

    @contextmanager
    def watching(self, run_id: bytes, step: int) -> Iterator[ProgressHook]:
        """A hook recording the step's progress while the block runs; forgotten when it ends."""
        meter, key = ProgressMeter(), (run_id, step)
        with self._lock:
            self._meters[key] = meter

        def hook(event: StepProgress) -> None:
            meter.observe(event if event.step is not None else replace(event, step=step))

        try:
            yield hook
        finally:
            with self._lock:
                if self._meters.get(key) is meter:
                    del self._meters[key]

    def progress(self, run_id: bytes, step: int) -> dict[str, Any] | None:
        """The step's progress now (run.progress_meter's shape), or None when it is not being replayed or has
        reported nothing yet."""
        with self._lock:
            meter = self._meters.get((run_id, step))
        view = None if meter is None else meter.now()
        return None if view is None else view.to_dict()


REPLAYS = ReplayBoard()  # this process's replays: a daemon runs one at a time, in its worker thread
