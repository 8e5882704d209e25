"""The daemon's log file: rotating, bounded, and rate-limited so that no peer can fill a disk through it.

Event lines (what the node did: audited, received, banned, ...) go to the
terminal, one line each; everything else goes to the log file, never to the
terminal:

- our own log records, with the traceback of every contained bug. A peer that
  provokes the same record over and over (a malformed frame per second, a
  refused request per millisecond) gets `LINES_PER_WINDOW` lines per
  `WINDOW_S` per kind of record; the rest are counted, and the count is
  written with the next such record after the window.
- the libraries' records (py-libp2p's warnings and errors: a DHT read that
  failed, a protocol a peer does not speak, a stream reset, a dial to a peer
  that left). They are the network's weather, not the node's events: written
  at DEBUG level as one line each, at most `LIBRARY_LINES_PER_WINDOW` per
  logger per `LIBRARY_WINDOW_S`; the first record after a window in which some
  were dropped (or the log's closing) writes one line saying how many.
  py-libp2p gives its loggers no handler and stops them propagating (its
  `setup_logging` at import, unless LIBP2P_DEBUG is set), so without ours
  Python's last-resort handler printed each of them, bare, on stderr.
- Python's warnings, exceptions of threads and "exception ignored" reports,
  with their tracebacks.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOG_FILE = "node.log"
MAX_BYTES = 16 << 20
BACKUPS = 3
WINDOW_S = 10.0
LINES_PER_WINDOW = 20
LIBRARY_WINDOW_S = 60.0
LIBRARY_LINES_PER_WINDOW = 10
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

logger = logging.getLogger(__name__)


class RateLimit(logging.Filter):
    """Lets through LINES_PER_WINDOW records of one (logger, message template) per WINDOW_S."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
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


def _one_line(record: logging.LogRecord) -> str:
    try:
        text = record.getMessage()
    except Exception:  # noqa: BLE001 (a library's bad format string must not lose the record)
        text = f"{record.msg!r} % {record.args!r}"
    return " ".join(text.split())[:2000]


class LibraryNoise(logging.Handler):
    """Writes a library's records to `target` at DEBUG, one line each (an exception's type and message at its
    end, not its traceback), at most LIBRARY_LINES_PER_WINDOW per logger per LIBRARY_WINDOW_S; then one line
    saying how many were dropped (before that logger's next record after the window, or when the handler
    closes)."""

    def __init__(self, target: logging.Handler, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(logging.DEBUG)
        self._target = target
        self._clock = clock
        self._windows: dict[str, tuple[float, int]] = {}  # logger -> (window start, records seen in it)

    def emit(self, record: logging.LogRecord) -> None:
        now = self._clock()
        start, seen = self._windows.get(record.name, (now, 0))
        if now - start >= LIBRARY_WINDOW_S:
            self._write_dropped(record.name, seen)
            start, seen = now, 0
        self._windows[record.name] = (start, seen + 1)
        if len(self._windows) > 10_000:  # logger names are few; a flood of distinct ones resets the table
            self._windows.clear()
        if seen >= LIBRARY_LINES_PER_WINDOW:
            return
        line = _one_line(record)
        if record.levelno > logging.DEBUG:
            line = f"({record.levelname.lower()}) {line}"
        if record.exc_info and record.exc_info[1] is not None:  # the exception in the line, not its traceback
            error = record.exc_info[1]
            line += f" [{type(error).__name__}: {' '.join(str(error).split())[:300]}]"
        fields = {**record.__dict__, "msg": line, "args": None, "exc_info": None, "exc_text": None, "stack_info": None}
        demoted = logging.makeLogRecord(fields)
        demoted.levelno, demoted.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        self._target.handle(demoted)

    def _write_dropped(self, name: str, seen: int) -> None:
        dropped = seen - LIBRARY_LINES_PER_WINDOW
        if dropped > 0:
            self._target.handle(
                logging.makeLogRecord(
                    {
                        "name": name,
                        "levelno": logging.DEBUG,
                        "levelname": logging.getLevelName(logging.DEBUG),
                        "msg": f"{dropped} more line(s) of this logger dropped (at most "
                        f"{LIBRARY_LINES_PER_WINDOW} per {LIBRARY_WINDOW_S:.0f} s)",
                    }
                )
            )

    def close(self) -> None:
        self.acquire()
        try:
            for name, (_, seen) in list(self._windows.items()):
                self._write_dropped(name, seen)
            self._windows.clear()
        finally:
            self.release()
        super().close()


def _log_thread_exception(args: Any) -> None:
    if args.exc_type is SystemExit:
        return
    thread = args.thread.name if args.thread is not None else "?"
    logger.error(
        "uncaught exception in thread %s", thread, exc_info=(args.exc_type, args.exc_value, args.exc_traceback)
    )


def _log_unraisable(unraisable: Any) -> None:
    exc = unraisable.exc_value
    info = (type(exc), exc, unraisable.exc_traceback) if exc is not None else None
    logger.warning("%s: %r", unraisable.err_msg or "exception ignored", unraisable.object, exc_info=info)


def open_log_file(home: Path, name: str = LOG_FILE, libraries: tuple[str, ...] = ()) -> Path:
    """Send log records to home/name (rotating, rate-limited): ours at INFO and above; the `libraries`'
    loggers' warnings and errors at DEBUG, rate-limited per logger (LibraryNoise); warnings, thread
    exceptions and unraisable exceptions too. Nothing of it reaches the terminal."""
    path = home / name
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.addFilter(RateLimit())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    noise = LibraryNoise(handler)
    for library in libraries:
        library_logger = logging.getLogger(library)
        library_logger.setLevel(logging.WARNING)
        library_logger.addHandler(noise)
        library_logger.propagate = False  # the root's handler would write it a second time, undemoted
    logging.captureWarnings(True)
    threading.excepthook = _log_thread_exception
    sys.unraisablehook = _log_unraisable
    return path
