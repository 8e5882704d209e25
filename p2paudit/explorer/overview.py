"""Each run's whole coverage (every step, every key, the page's 1,000 columns): what the runs list and a run's page
open on, kept ready so that neither waits for a pass over a million index rows.

- At start, a background thread computes it for every run (`warm_in_background`).
- Before that, the overviews a previous server saved (`saved`, kept by the CLI in
  its cache folder) are taken back (`restore`), each only if this ledger's RFC 9162
  root at the size it was made at is the one it names (the ledger is append-only,
  so its counts are still true of those entries): the first page after a start
  gets one at once while the current one is made.
- A request at a ledger size with no answer yet gets the newest answer of an
  earlier size (its `ledger_size` says which: the ledger is append-only, so it
  is true of those entries) and a background refresh is started; without any
  earlier answer, it is computed there and then.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

from ledger import LedgerError
from p2paudit.attest.errors import AttestationError
from p2paudit.attest.store import AttestationStore
from p2paudit.defaults import DEFAULT_REDUNDANCY
from p2paudit.explorer.cache import ResultCache
from p2paudit.explorer.coverage import CoverageStrip, bucket_coverage, strip_from_dict

COLUMNS = 1000  # = the page's strip
OVERVIEW_MIN = DEFAULT_REDUNDANCY  # "checked R times" on the runs list and a run's first view: the network's R
SAVED_FORMAT = "p2paudit-explorer-overviews"
SAVED_VERSION = 1
_REFRESH_ERRORS = (AttestationError, LedgerError, sqlite3.Error)  # a ledger that cannot be read now: next request


class Overviews:
    def __init__(self, ledger_path: Path, cache: ResultCache[CoverageStrip]) -> None:
        self.ledger_path = ledger_path
        self.cache = cache
        self._latest: dict[bytes, CoverageStrip] = {}
        self._refreshing: set[bytes] = set()
        self._lock = threading.Lock()

    def compute(self, store: AttestationStore, run_id: bytes) -> CoverageStrip:
        """The run's overview at the store's current size (computed once per size, whoever asks)."""
        key = (str(self.ledger_path), store.ledger.size, "overview", run_id)
        strip = self.cache.get_or_compute(
            key, lambda: bucket_coverage(store, run_id, buckets=COLUMNS, min_count=OVERVIEW_MIN)
        )
        with self._lock:
            held = self._latest.get(run_id)
            if held is None or held.ledger_size < strip.ledger_size:
                self._latest[run_id] = strip
        return strip

    def get(self, store: AttestationStore, run_id: bytes) -> CoverageStrip:
        """The overview at the current size if made, else the newest older one (refreshed meanwhile), else made now."""
        size = store.ledger.size
        with self._lock:
            held = self._latest.get(run_id)
        if held is None or held.ledger_size >= size:
            return self.compute(store, run_id) if held is None else held
        self._refresh(run_id)
        return held

    def _refresh(self, run_id: bytes) -> None:
        with self._lock:
            if run_id in self._refreshing:
                return
            self._refreshing.add(run_id)

        def work() -> None:
            try:
                with AttestationStore.open_readonly(self.ledger_path) as store:
                    self.compute(store, run_id)
            except _REFRESH_ERRORS:
                pass  # the ledger cannot be read now; the next request tries again (and reports it)
            finally:
                with self._lock:
                    self._refreshing.discard(run_id)

        threading.Thread(target=work, name="p2paudit-explorer-refresh", daemon=True).start()

    def warm_in_background(self) -> threading.Thread:
        """Compute every run's overview now, in a thread, so the first page does not wait for it (but not one
        taken back from a saved file at this very size: it is the same answer)."""

        def work() -> None:
            try:
                with AttestationStore.open_readonly(self.ledger_path) as store:
                    for info in store.runs():
                        with self._lock:
                            held = self._latest.get(info.run_id)
                        if held is None or held.ledger_size < store.ledger.size:
                            self.compute(store, info.run_id)
            except _REFRESH_ERRORS:
                pass  # no ledger yet (a daemon's first seconds): requests compute it when there is one

        thread = threading.Thread(target=work, name="p2paudit-explorer-warm", daemon=True)
        thread.start()
        return thread

    def saved(self, store: AttestationStore) -> dict[str, Any]:
        """Every run's newest overview, each with the ledger's root at its size, as JSON-ready values."""
        with self._lock:
            held = list(self._latest.values())
        strips = [{**strip.to_dict(), "root": store.ledger.root(strip.ledger_size).hex()} for strip in held]
        return {"format": SAVED_FORMAT, "version": SAVED_VERSION, "origin": store.ledger.origin, "strips": strips}

    def restore(self, store: AttestationStore, data: object) -> int:
        """Take back the saved overviews that are true of this ledger (its origin, a size it has reached, the root
        at that size); how many were taken. Anything else in `data` is ignored: it is only a cache."""
        if not isinstance(data, dict) or (data.get("format"), data.get("version")) != (SAVED_FORMAT, SAVED_VERSION):
            return 0
        if data.get("origin") != store.ledger.origin or not isinstance(data.get("strips"), list):
            return 0
        taken = 0
        for item in data["strips"]:
            strip = self._valid_strip(store, item)
            if strip is None:
                continue
            with self._lock:
                held = self._latest.get(strip.run.run_id)
                if held is None or held.ledger_size < strip.ledger_size:
                    self._latest[strip.run.run_id] = strip
                    taken += 1
        return taken

    def restore_from(self, data: object) -> int:
        """`restore` on the ledger file, opened read-only; 0 when it cannot be read now (no ledger yet)."""
        try:
            with AttestationStore.open_readonly(self.ledger_path) as store:
                return self.restore(store, data)
        except _REFRESH_ERRORS:
            return 0

    def to_save(self) -> dict[str, Any] | None:
        """`saved` on the ledger file, opened read-only; None when it cannot be read now."""
        try:
            with AttestationStore.open_readonly(self.ledger_path) as store:
                return self.saved(store)
        except _REFRESH_ERRORS:
            return None

    def _valid_strip(self, store: AttestationStore, item: Any) -> CoverageStrip | None:
        try:
            run = store.run_info(bytes.fromhex(item["run_id"]))
            strip = strip_from_dict(item, run)
            whole = (strip.start, strip.stop, strip.min_count, strip.trusted_keys, len(strip.buckets))
            if whole != (0, run.steps, OVERVIEW_MIN, None, min(COLUMNS, run.steps)):
                return None  # not an overview (another range, filter or width)
            if not 0 < strip.ledger_size <= store.ledger.size:
                return None
            if store.ledger.root(strip.ledger_size).hex() != item["root"]:
                return None  # another ledger of this origin, or one rewritten: its counts say nothing here
            return strip
        except (KeyError, TypeError, ValueError, AttestationError, LedgerError):
            return None
