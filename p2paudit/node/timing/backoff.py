"""Exponential back-off: the one schedule every retry in the node follows.

`BackoffPolicy` is the frozen schedule (the first delay, the factor, the cap);
`Backoff` is one thing being backed off from (a peer for sync, a run whose
fetches fail, a relay, a supervised loop): `failed(now)` starts the next,
longer wait, `succeeded()` forgets it, `ready(now)` and `wait(now)` say where
it stands. The time is always an argument: under trio it is
`trio.current_time()` (so tests run it on `trio.testing.MockClock`), in a
worker thread `time.monotonic()`; the two are never mixed on one object.
No jitter: a schedule a test can state exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Generic, TypeVar

from p2paudit.errors import InputError
from p2paudit.node.timing.bounded_map import BoundedMap

K = TypeVar("K")


@dataclass(frozen=True)
class BackoffPolicy:
    """Waits of `base` seconds, times `factor` after each failure in a row, never above `cap`."""

    base: float
    cap: float
    factor: float = 2.0

    def __post_init__(self) -> None:
        # Config values (redial_min, redial_max) reach here: bad ones are named, never a silent zero wait.
        if not (0 < self.base <= self.cap < math.inf) or not self.factor >= 1:
            raise InputError(
                f"back-off needs 0 < base <= cap < inf and factor >= 1, got base={self.base} "
                f"cap={self.cap} factor={self.factor}"
            )

    def after(self, previous: float) -> float:
        """The wait that follows a wait of `previous` seconds (0: the first failure): base, then times factor."""
        return self.base if previous <= 0 else min(previous * self.factor, self.cap)


class Backoff:
    """Where one thing stands in its back-off: the last wait (`delay`, 0 after a success) and when the next
    try is allowed (`not_before`, on the caller's clock)."""

    __slots__ = ("policy", "delay", "not_before")

    def __init__(self, policy: BackoffPolicy) -> None:
        self.policy = policy
        self.delay = 0.0
        self.not_before = -math.inf

    def failed(self, now: float) -> float:
        """Another failure at `now`: the wait grows (base first); returns it."""
        self.delay = self.policy.after(self.delay)
        self.not_before = now + self.delay
        return self.delay

    def succeeded(self) -> None:
        """It worked: the next failure waits `base` again, and a try is allowed at once."""
        self.delay = 0.0
        self.not_before = -math.inf

    @property
    def next_delay(self) -> float:
        """The wait the next failure would start."""
        return self.policy.after(self.delay)

    def ready(self, now: float) -> bool:
        """Whether a try is allowed at `now` (the wait is over, or there is none)."""
        return now >= self.not_before

    def wait(self, now: float) -> float:
        """Seconds from `now` until a try is allowed (0 if it is)."""
        return max(0.0, self.not_before - now)

    def __repr__(self) -> str:
        return f"Backoff(delay={self.delay}, not_before={self.not_before})"


class Backoffs(Generic[K]):
    """One `Backoff` per key (a peer, a run, a step), all on one policy, in a BoundedMap: a key that
    succeeds, or that the bound drops, starts afresh."""

    def __init__(self, policy: BackoffPolicy, max_size: int) -> None:
        self.policy = policy
        self._states: BoundedMap[K, Backoff] = BoundedMap(max_size)

    def failed(self, key: K, now: float) -> float:
        """Another failure of `key` at `now`; returns the wait it starts."""
        state = self._states.get(key) or Backoff(self.policy)
        delay = state.failed(now)
        self._states.put(key, state, now)
        return delay

    def succeeded(self, key: K) -> None:
        self._states.pop(key)

    forget = succeeded

    def ready(self, key: K, now: float) -> bool:
        state = self._states.get(key)
        return state is None or state.ready(now)

    def wait(self, key: K, now: float) -> float:
        """Seconds from `now` until `key` may be tried (0 if it may)."""
        state = self._states.get(key)
        return 0.0 if state is None else state.wait(now)

    def not_before(self, key: K) -> float | None:
        """When `key` may be tried again (None: no back-off for it)."""
        state = self._states.get(key)
        return None if state is None else state.not_before

    def waiting(self, now: float) -> list[K]:
        """The keys still waiting at `now`, oldest failure first."""
        return [key for key, state in self._states.items() if not state.ready(now)]

    def __contains__(self, key: object) -> bool:
        return key in self._states

    def __len__(self) -> int:
        return len(self._states)
