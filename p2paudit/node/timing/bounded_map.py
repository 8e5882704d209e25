"""A map that never outgrows its bound: the one the node keeps what peers make it remember in.

Entries are kept oldest first. `put` makes a key the newest; past `max_size`
the oldest entries go, and `put` returns them (a ban that goes must be
lifted). An entry may also have a time after which it is over: `max_age`
seconds after it was put, or its own `until` (a ban's end). An entry that is
over reads as absent wherever a time is given, and `expire(now)` takes the
over ones out and returns them. The time is always an argument (the caller's
clock: `trio.current_time()` under trio, so MockClock drives it in tests).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Generic, TypeVar, overload

from p2paudit.errors import InputError

K = TypeVar("K")
V = TypeVar("V")


class BoundedMap(Generic[K, V]):
    """At most `max_size` entries, oldest first; with `max_age`, each is over that long after it was put."""

    def __init__(self, max_size: int, max_age: float | None = None) -> None:
        if max_size < 1 or (max_age is not None and not max_age > 0):
            raise InputError(f"bounded map needs max_size >= 1 and max_age > 0, got {max_size} and {max_age}")
        self.max_size = max_size
        self.max_age = max_age
        self._entries: dict[K, tuple[float, V]] = {}  # key -> (over at, value), oldest first

    def put(self, key: K, value: V, now: float = 0.0, until: float | None = None) -> list[tuple[K, V]]:
        """Set `key` (now the newest) at time `now`, over at `until` (default now + max_age, or never);
        returns the oldest entries dropped to keep the bound."""
        over = until if until is not None else math.inf if self.max_age is None else now + self.max_age
        self._entries.pop(key, None)
        self._entries[key] = (over, value)
        dropped = []
        while len(self._entries) > self.max_size:
            oldest = next(iter(self._entries))
            dropped.append((oldest, self._entries.pop(oldest)[1]))
        return dropped

    def _live(self, key: K, now: float | None) -> tuple[float, V] | None:
        entry = self._entries.get(key)
        if entry is None or (now is not None and entry[0] <= now):
            return None
        return entry

    @overload
    def get(self, key: K, default: None = None, now: float | None = None) -> V | None: ...
    @overload
    def get(self, key: K, default: V, now: float | None = None) -> V: ...
    def get(self, key: K, default: V | None = None, now: float | None = None) -> V | None:
        """The value of `key`, or `default` if absent (or over at `now`, when given)."""
        entry = self._live(key, now)
        return default if entry is None else entry[1]

    def until(self, key: K) -> float | None:
        """When `key` is over (math.inf: never; None if absent)."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def alive(self, key: K, now: float) -> bool:
        """Whether `key` is here and not over at `now`."""
        return self._live(key, now) is not None

    def pop(self, key: K, default: V | None = None) -> V | None:
        entry = self._entries.pop(key, None)
        return default if entry is None else entry[1]

    def expire(self, now: float) -> list[tuple[K, V]]:
        """Take out every entry over at `now`; returns them, oldest first."""
        over = [(key, entry[1]) for key, entry in self._entries.items() if entry[0] <= now]
        for key, _ in over:
            del self._entries[key]
        return over

    def items(self, now: float | None = None) -> list[tuple[K, V]]:
        """(key, value) oldest first; with `now`, only the entries not over then."""
        return [(k, e[1]) for k, e in self._entries.items() if now is None or e[0] > now]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._entries))
