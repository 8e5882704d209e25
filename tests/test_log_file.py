"""The daemon's log file is rate-limited per kind of record, so a peer cannot fill the disk through it."""

import logging

from p2paudit.cli.log_file import LINES_PER_WINDOW, WINDOW_S, RateLimit


def test_repeated_records_are_suppressed_and_counted():
    now = [0.0]
    limit = RateLimit(clock=lambda: now[0])

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("p2paudit.node", logging.WARNING, __file__, 1, msg, ("peer",), None)

    passed = [limit.filter(record("malformed input from %s")) for _ in range(500)]
    assert sum(passed) == LINES_PER_WINDOW
    assert limit.filter(record("another template %s"))  # counted apart
    now[0] = WINDOW_S + 0.1
    late = record("malformed input from %s")
    assert limit.filter(late)
    assert late.msg.startswith(f"[{500 - LINES_PER_WINDOW} more like this were suppressed")
