"""How long the event loop was ever held by one task step: the longest stall between two trio checkpoints.

Every peer's streams, gossip and the daemon's loops share one trio thread, so
any code that runs long without awaiting (a commit with fsync, a signature
check of a big batch, a scan of every step) stalls all of them at once. A
trio Instrument sees each task step begin and end; the longest step is the
longest time nothing else could run. Cheap: two clock reads per step.
"""

from __future__ import annotations

import time
from collections import deque

import trio

WINDOW_S = 60


class LoopMonitor(trio.abc.Instrument):
    """Pass to `trio.run(..., instruments=[monitor])`; read `longest_s` and `longest_task` at any time."""

    def __init__(self) -> None:
        self.longest_s = 0.0
        self.longest_task = ""
        self.steps = 0
        self._began = 0.0
        # (second, longest step that began in it), for the last WINDOW_S seconds: the stall *now*,
        # apart from start-up (first imports, key derivation) which the lifetime figure includes.
        self._recent: deque[tuple[int, float]] = deque(maxlen=WINDOW_S)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._began = time.perf_counter()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        spent = time.perf_counter() - self._began
        self.steps += 1
        if spent > self.longest_s:
            self.longest_s = spent
            self.longest_task = task.name[-120:]
        second = int(self._began)
        if self._recent and self._recent[-1][0] == second:
            if spent > self._recent[-1][1]:
                self._recent[-1] = (second, spent)
        else:
            self._recent.append((second, spent))

    def recent_longest_s(self) -> float:
        horizon = int(time.perf_counter()) - WINDOW_S
        return max((spent for second, spent in self._recent if second > horizon), default=0.0)

    def health(self) -> dict[str, float | str | int]:
        return {
            "longest_stall_ms": round(self.longest_s * 1000, 3),
            "stall_task": self.longest_task,
            "longest_stall_last_60s_ms": round(self.recent_longest_s() * 1000, 3),
        }
