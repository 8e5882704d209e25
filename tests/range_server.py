"""A run server for the tests: a real HTTP/1.1 server (http.server) on 127.0.0.1 that serves a run directory
under /run/, answers Range requests (206 with Content-Range), logs every request, and lies on demand."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

STALL_SECONDS = 3.0


@dataclass
class Served:
    """What the server did: one (path, Range header, status, body bytes sent) per request.

    `behaviors` (run-relative path -> "wrong", "ignore-range", "shift-range", "stall", "truncate")
    make it lie;
    `mutate` changes a file's bytes as served; `drop_at` (path -> file offset) breaks the connection
    once, at that offset, in the first response whose body crosses it."""

    root: Path
    behaviors: dict[str, str] = field(default_factory=dict)
    mutate: dict[str, Callable[[bytes], bytes]] = field(default_factory=dict)
    drop_at: dict[str, int] = field(default_factory=dict)
    log: list[tuple[str, str | None, int, int]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sent(self, path: str | None = None) -> int:
        return sum(n for p, _, _, n in self.log if path is None or p == path)

    def paths(self) -> set[str]:
        return {p for p, *_ in self.log}

    def ranges(self, path: str) -> list[str | None]:
        return [r for p, r, _, _ in self.log if p == path]


_RANGE_HEADER = re.compile(r"bytes=([0-9]+)-([0-9]*)")


def _handler(served: Served):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _record(self, path, status, sent):
            with served.lock:
                served.log.append((path, self.headers.get("Range"), status, sent))

        def do_GET(self):  # noqa: N802 (http.server's name)
            raw = self.path.split("?")[0]
            if raw.startswith("/moved/"):  # a same-scheme redirect
                return self._redirect(raw, raw[len("/moved") :])
            if raw.startswith("/loop/"):  # redirects for ever
                return self._redirect(raw, raw)
            if raw.startswith("/toscheme/"):  # a downgrade or upgrade of the scheme
                host, port = self.server.server_address[:2]
                return self._redirect(raw, f"https://{host}:{port}{raw[len('/toscheme') :]}")
            path = raw.removeprefix("/run/")
            file = served.root / path
            if not raw.startswith("/run/") or ".." in path or not file.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return self._record(path, 404, 0)
            data = file.read_bytes()
            behavior = served.behaviors.get(path, "normal")
            if behavior == "wrong":
                data = bytes(b ^ 0x01 for b in data[:64]) + data[64:]
            if path in served.mutate:
                data = served.mutate[path](data)
            start, end = 0, len(data) - 1
            wanted = _RANGE_HEADER.fullmatch(self.headers.get("Range") or "")
            ranged = wanted is not None and behavior != "ignore-range"
            if ranged:
                start = int(wanted.group(1))
                end = min(int(wanted.group(2)), end) if wanted.group(2) else end
            body = data[start : end + 1]
            self.send_response(206 if ranged else 200)
            if ranged:
                shift = 1 if behavior == "shift-range" else 0  # claims other bytes than it sends
                self.send_header("Content-Range", f"bytes {start + shift}-{end}/{len(data)}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if behavior == "stall":
                served.stop.wait(STALL_SECONDS)
            drop = served.drop_at.get(path)
            broken = behavior == "truncate" or (drop is not None and start <= drop < start + len(body))
            if behavior == "truncate":
                body = body[: len(body) // 2]
            elif broken:
                body = body[: drop - start]
                del served.drop_at[path]
            try:
                self.wfile.write(body)
                self.wfile.flush()
            except OSError:
                pass
            self._record(path, 206 if ranged else 200, len(body))
            if broken:
                self.close_connection = True

        def _redirect(self, raw, location):
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self._record(raw, 302, 0)

    return Handler


@contextmanager
def serve_run(root: Path) -> Iterator[tuple[str, Served]]:
    """(base URL of the server, Served) for the run directory `root` on 127.0.0.1."""
    served = Served(root)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", served
    finally:
        served.stop.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
