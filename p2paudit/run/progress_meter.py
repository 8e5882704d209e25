"""Progress within a step, for people: a step core's events (engine.progress) turned into a share done, an elapsed
time and a time left, rate-limited for the terminal bar, the --json events, the daemon's status and the explorer.

No I/O here: `ProgressMeter` holds a clock and the current step's start; the
consumers (cli's bar and JSON lines, node's status file, the explorer's node
page) render its `ProgressView`, whose dict form is the one documented shape:

    {"step": int | null, "phase": "micro-batch" | "update", "fraction": float in [0, 1],
     "counts": {"micro_batches_done": int, "micro_batches": int, "layers_done": int, "layers": int,
                "params_done": int, "params": int},
     "elapsed": float (seconds since the step began), "eta_seconds": float | null (null until a rate is known)}

Time left is the step's own average rate so far: elapsed * (1 - fraction) /
fraction. The step's micro-batches are equal work (same shapes), so the
average is the steadiest estimate, and it needs no history.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from p2paudit.engine.progress import ProgressHook, StepProgress

__all__ = ["ProgressHook", "ProgressMeter", "ProgressView", "StepProgress", "event_line", "time_left", "view_from_dict"]
# StepProgress and ProgressHook are the engine's (engine.progress): node/ reaches them here, through run.

DEFAULT_INTERVAL = 0.25  # seconds between two views handed out: at most 4 a second, plus each step's last
COUNT_NAMES = ("micro_batches_done", "micro_batches", "layers_done", "layers", "params_done", "params")


def time_left(fraction: float, elapsed: float) -> float | None:
    """Seconds left at the average rate so far; None before any work is done or any time has passed."""
    if fraction >= 1.0:
        return 0.0
    if fraction <= 0.0 or elapsed <= 0.0:
        return None
    return elapsed * (1.0 - fraction) / fraction


@dataclass(frozen=True)
class ProgressView:
    """One step's progress as shown: where it is, how long it has taken, how long it should still take."""

    step: int | None
    phase: str
    fraction: float
    counts: dict[str, int] = field(default_factory=dict)
    elapsed: float = 0.0
    eta_seconds: float | None = None

    @property
    def finished(self) -> bool:
        return self.fraction >= 1.0

    def aged(self, seconds: float) -> ProgressView:
        """The same view `seconds` later with no news: more time elapsed, that much less left (never below 0)."""
        seconds = max(0.0, seconds)
        left = None if self.eta_seconds is None else max(0.0, self.eta_seconds - seconds)
        return ProgressView(self.step, self.phase, self.fraction, dict(self.counts), self.elapsed + seconds, left)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "phase": self.phase,
            "fraction": round(self.fraction, 6),
            "counts": dict(self.counts),
            "elapsed": round(self.elapsed, 3),
            "eta_seconds": None if self.eta_seconds is None else round(self.eta_seconds, 3),
        }


def view_from_dict(data: object) -> ProgressView | None:
    """A view read back from JSON (a status file), or None when `data` is not one (an older daemon, a bad file)."""
    if not isinstance(data, dict):
        return None
    fraction, elapsed, eta = data.get("fraction"), data.get("elapsed"), data.get("eta_seconds")
    given = data.get("counts")
    counts = given if isinstance(given, dict) else {}
    step = data.get("step")
    if not _number(fraction) or not _number(elapsed) or not (eta is None or _number(eta)):
        return None
    return ProgressView(
        step if type(step) is int else None,
        str(data.get("phase", "")),
        min(max(float(fraction), 0.0), 1.0),
        {name: counts[name] for name in COUNT_NAMES if type(counts.get(name)) is int},
        float(elapsed),
        None if eta is None else float(eta),
    )


def _number(value: object) -> TypeGuard[int | float]:
    """A finite int or float (not a bool, NaN or an infinity)."""
    if type(value) is int or type(value) is float:
        return value == value and abs(value) != float("inf")
    return False


class ProgressMeter:
    """Turns one driver's stream of StepProgress events into views, and says which to show.

    A step begins when the meter is made (the first) or when an event names
    another step, or a smaller share than the last (a driver that leaves
    `step` None); a later step's clock starts at the previous step's last
    event, so the checkpoint loading and digests between two steps' work count
    into the step that needs them. One thread calls `observe`; `latest` may be
    read from any other (a reference, replaced whole).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, interval: float = DEFAULT_INTERVAL) -> None:
        self._clock = clock
        self._interval = interval
        self._began = clock()
        self._last_event_at = self._began
        self._last_shown_at: float | None = None
        self._held: tuple[ProgressView, float] | None = None  # the latest view and when its event came

    @property
    def latest(self) -> ProgressView | None:
        held = self._held
        return None if held is None else held[0]

    def observe(self, event: StepProgress) -> ProgressView | None:
        """Record an event; the view to show now, or None when the last one shown is too recent.

        Shown: the first event, each step's last (fraction 1), and otherwise
        at most one every `interval` seconds.
        """
        now = self._clock()
        fraction = min(max(event.fraction(), 0.0), 1.0)
        previous = self.latest
        new_step = previous is None or event.step != previous.step or fraction < previous.fraction
        if new_step and previous is not None:
            self._began = self._last_event_at
        elapsed = now - self._began
        counts = {name: getattr(event, name) for name in COUNT_NAMES}
        view = ProgressView(event.step, event.phase, fraction, counts, elapsed, time_left(fraction, elapsed))
        self._held, self._last_event_at = (view, now), now
        last = self._last_shown_at
        if not view.finished and last is not None and now - last < self._interval:
            return None
        self._last_shown_at = now
        return view

    def now(self) -> ProgressView | None:
        """The latest view brought up to this moment (aged since its event), or None before any event."""
        held = self._held
        if held is None:
            return None
        view, at = held
        return view if view.finished else view.aged(self._clock() - at)


def event_line(view: ProgressView) -> dict[str, Any]:
    """A --json progress event: {"event": "progress", **view}."""
    return {"event": "progress", **view.to_dict()}
