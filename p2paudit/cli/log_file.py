"""The daemon's log file: rotating, bounded, and rate-limited so that no peer can fill a disk through it.

Event lines (what the node did: audited, received, banned, ...) go to the
terminal; the log file gets the library's and our own log records, with the
traceback of every contained bug. A peer that provokes the same record over
and over (a malformed frame per second, a refused request per millisecond)
gets `LINES_PER_WINDOW` lines per `WINDOW_S` per kind of record; the rest are
counted, and the count is written with the next such record after the window.
"""

from __future__ import annotations

import logging
import logging.handlers
import time
from pathlib import Path

LOG_FILE = "node.log"
MAX_BYTES = 16 << 20
BACKUPS = 3
WINDOW_S = 10.0
LINES_PER_WINDOW = 20


class RateLimit(logging.Filter):
    """Lets through LINES_PER_WINDOW records of one (logger, message template) per WINDOW_S."""

    def __init__(self, clock=time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._windows: dict[tuple[str, str], tuple[float, int]] = {}  # key -> (window start, records seen)

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self._clock()
        start, seen = self._windows.get(key, (now, 0))
        if now - start >= WINDOW_S:
            if seen > LINES_PER_WINDOW:
                record.msg = f"[{seen - LINES_PER_WINDOW} more like this were suppressed in {WINDOW_S:.0f} s] " + str(
                    record.msg
                )
            start, seen = now, 0
        self._windows[key] = (start, seen + 1)
        if len(self._windows) > 10_000:  # templates are few; a flood of distinct ones resets the table
            self._windows.clear()
        return seen < LINES_PER_WINDOW


def open_log_file(home: Path) -> Path:
    """Send log records to home/node.log (rotating, rate-limited); libp2p's own at WARNING and above."""
    path = home / LOG_FILE
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RateLimit())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.getLogger("libp2p").setLevel(logging.WARNING)
    logging.getLogger("multiaddr").setLevel(logging.WARNING)
    return path
