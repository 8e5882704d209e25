"""Answers kept per ledger size: the ledger is append-only, so an answer computed at size n stays true at n."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

MAX_ENTRIES = 256


class ResultCache:
    """A small thread-safe LRU of computed answers; the key must include the ledger size they were read at.

    Two requests for one key compute it once: the second waits for the first
    (a page asks for a run's summary and its coverage at the same time, and
    both come from the same aggregation).
    """

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}
        self._max = max_entries

    def _lookup(self, key: Hashable) -> tuple[bool, Any]:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return True, self._items[key]
            return False, None

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The cached answer for `key`, else compute() once (other threads asking for `key` meanwhile wait)."""
        found, value = self._lookup(key)
        if found:
            return value
        with self._lock:
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:
            found, value = self._lookup(key)
            if found:
                return value
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
