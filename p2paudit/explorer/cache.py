"""Answers kept per ledger size: the ledger is append-only, so an answer computed at size n stays true at n."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

MAX_ENTRIES = 256


class ResultCache:
    """A small thread-safe LRU of computed answers; the key must include the ledger size they were read at."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_entries

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        """The cached answer for `key`, else compute() (outside the lock: two threads may both compute it)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = compute()
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._max:
                self._items.popitem(last=False)
        return value
