"""The daemon's log file is rate-limited per kind of record, so a peer cannot fill the disk through it; py-libp2p's
noise goes there, not to the terminal, and the terminal gets one line per event."""

import logging
import sys
import threading

import pytest

from p2paudit.cli.log_file import (
    LIBRARY_LINES_PER_WINDOW,
    LIBRARY_WINDOW_S,
    LINES_PER_WINDOW,
    WINDOW_S,
    LibraryNoise,
    RateLimit,
    open_log_file,
)
from p2paudit.cli.status_lines import MAX_LINE, one_line


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


class Kept(logging.Handler):
    """A sink that keeps what reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_library_records_are_demoted_to_one_debug_line_and_rate_limited_per_logger_per_minute():
    now = [0.0]
    kept = Kept()
    noise = LibraryNoise(kept, clock=lambda: now[0])

    def warn(name: str, text: str) -> None:
        noise.handle(logging.LogRecord(name, logging.WARNING, __file__, 1, text, ("x",), None))

    for _ in range(LIBRARY_LINES_PER_WINDOW + 15):
        warn("libp2p.kad_dht.kad_dht", "Failed to read DHT message\n  from stream: %s")
    warn("libp2p.network.swarm", "fail to upgrade mux for peer %s")  # another logger: its own allowance
    lines = [(r.name, r.levelno, r.getMessage()) for r in kept.records]
    assert len(lines) == LIBRARY_LINES_PER_WINDOW + 1
    assert lines[0] == ("libp2p.kad_dht.kad_dht", logging.DEBUG, "(warning) Failed to read DHT message from stream: x")
    assert lines[-1] == ("libp2p.network.swarm", logging.DEBUG, "(warning) fail to upgrade mux for peer x")
    now[0] = LIBRARY_WINDOW_S + 1  # the next minute: first the count of what was dropped, then the record
    warn("libp2p.kad_dht.kad_dht", "Failed to read DHT message from stream: %s")
    dropped, record = kept.records[-2:]
    assert dropped.name == "libp2p.kad_dht.kad_dht" and dropped.getMessage().startswith("15 more line(s)")
    assert record.getMessage().endswith("from stream: x")
    for _ in range(LIBRARY_LINES_PER_WINDOW + 3):
        warn("libp2p.transport.tcp.tcp", "Failed to open TCP stream: %s")
    noise.close()  # closing writes the counts still pending
    assert kept.records[-1].getMessage().startswith("3 more line(s)") and kept.records[-1].levelno == logging.DEBUG


@pytest.fixture
def clean_logging():
    """open_log_file changes the process's logging and hooks: put them back afterwards."""
    root, libp2p = logging.getLogger(), logging.getLogger("libp2p")
    saved = (root.handlers[:], root.level, libp2p.handlers[:], libp2p.level, libp2p.propagate)
    hooks = (threading.excepthook, sys.unraisablehook)
    yield
    for logger, handlers in ((root, saved[0]), (libp2p, saved[2])):
        for handler in logger.handlers[:]:
            if handler not in handlers:
                logger.removeHandler(handler)
                handler.close()
    root.setLevel(saved[1])
    libp2p.setLevel(saved[3])
    libp2p.propagate = saved[4]
    threading.excepthook, sys.unraisablehook = hooks
    logging.captureWarnings(False)


def test_the_daemons_log_takes_py_libp2ps_noise_and_stray_tracebacks_off_the_terminal(tmp_path, capfd, clean_logging):
    from p2paudit.node.net import LIBRARY_LOGGERS  # imports py-libp2p, which sets its loggers up

    path = open_log_file(tmp_path, libraries=LIBRARY_LOGGERS)
    logging.getLogger("libp2p.network.swarm").error("fail to upgrade mux for peer %s", "12D3KooWPeer")
    logging.getLogger("libp2p.host.basic_host").error("Failed to open stream:\n  Error: protocols not supported")
    logging.getLogger("p2paudit.node.test").info("our own record")
    try:
        raise OSError("connection reset\nby peer")
    except OSError:
        logging.getLogger("libp2p.stream_muxer.yamux").exception("Error in stream %s", 3)

    def fail() -> None:
        raise RuntimeError("a bug in a thread")

    thread = threading.Thread(target=fail, name="worker")
    thread.start()
    thread.join()
    for handler in logging.getLogger().handlers:
        handler.flush()
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    text = path.read_text()
    assert "DEBUG libp2p.network.swarm: (error) fail to upgrade mux for peer 12D3KooWPeer\n" in text
    assert "DEBUG libp2p.host.basic_host: (error) Failed to open stream: Error: protocols not supported\n" in text
    assert "INFO p2paudit.node.test: our own record" in text
    assert "DEBUG libp2p.stream_muxer.yamux: (error) Error in stream 3 [OSError: connection reset by peer]\n" in text
    assert text.count("Traceback") == 1  # the thread's, below: ours to fix; the library's exception is one line
    assert "uncaught exception in thread worker" in text and "RuntimeError: a bug in a thread" in text


def test_an_event_line_is_one_line_whatever_a_peer_put_in_it():
    assert one_line("refused: \x1b[2J\x1b]0;owned\x07 reason\nsecond line\r\tthird") == (
        "refused: ?[2J?]0;owned? reason second line third"
    )
    assert one_line("x" * 1000) == "x" * (MAX_LINE - 3) + "..."
