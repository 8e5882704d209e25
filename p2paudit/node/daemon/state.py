"""What the daemon's parts share, each handed to the parts that need it when they are made: the report
lines and the progress (when something last changed here, who was synced since, the counts)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import trio

MAX_EVENTS = 20  # event lines the status file shows


@dataclass(frozen=True)
class DaemonEvent:
    """What the CLI shows: kind (audited, received, conflict, evidence, synced, witnessed, peer, refused, done)."""

    kind: str
    text: str


class Reporter:
    """The daemon's event lines: each sent to `emit` (the CLI), the last MAX_EVENTS kept for the status file.
    Called as report(kind, text)."""

    def __init__(self, emit: Callable[[DaemonEvent], None]) -> None:
        self.emit = emit
        self.events: list[str] = []

    def __call__(self, kind: str, text: str) -> None:
        self.events = (self.events + [f"{kind}: {text}"])[-MAX_EVENTS:]
        self.emit(DaemonEvent(kind, text))


class Progress:
    """When something last changed in this node's ledger (trio's clock; +inf until the daemon starts it:
    made outside the loop, nothing has been quiet yet), the peers synced since, and what was done."""

    def __init__(self) -> None:
        self.last_change = math.inf
        self.synced_since_change: set[str] = set()
        self.audited = 0
        self.received = 0

    def changed(self) -> None:
        """Something new is in the ledger: the quiet time starts again, and every peer must be synced again."""
        self.last_change = trio.current_time()
        self.synced_since_change.clear()

    def quiet_for(self) -> float:
        """Seconds since the last change (trio's clock)."""
        return trio.current_time() - self.last_change

    def got(self, new: int) -> None:
        """`new` attestations arrived from peers (gossip or sync)."""
        if new:
            self.received += new
            self.changed()
