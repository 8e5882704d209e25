"""Answers kept per ledger size: the ledger is append-only, so an answer computed at size n stays true at n."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

MAX_ENTRIES = 256

V = TypeVar("V")


class ResultCache(Generic[V]):
    """A small thread-safe LRU of computed answers of one kind (V); the key must include the ledger size they
    were read at.

    Two requests for one key compute it once: the second waits for the first
    (a page asks for a run's summary and its coverage at the same time, and
    both come from the same aggregation).
    """

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}
        self._max = max_entries

    def _lookup(self, key: Hashable) -> tuple[V] | None:
        """(the answer,) when held (a tuple, so that a held None is told from none held), else None."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return (self._items[key],)
            return None

    def get_or_compute(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The cached answer for `key`, else compute() once (other threads asking for `key` meanwhile wait)."""
        held = self._lookup(key)
        if held is not None:
            return held[0]
        with self._lock:
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:
            held = self._lookup(key)
            if held is not None:
                return held[0]
            try:
                value = compute()
            except BaseException:
                with self._lock:
                    self._computing.pop(key, None)
                raise
            with self._lock:
                self._items[key] = value
                self._computing.pop(key, None)
                while len(self._items) > self._max:
                    self._items.popitem(last=False)
        return value
