"""A hostile run server for the tests and benchmarks/slow_server_bench.py: a real HTTP/1.1 server on 127.0.0.1
that serves a run directory, and for chosen files trickles, stalls, sends for ever or redirects.

`behaviors` maps a run-relative path (or "*" for every path) to what the server does with it:
- "trickle-head": the status line and headers, one byte every `gap` seconds, then the body likewise;
- "trickle": headers at once, then the body one byte every `gap` seconds;
- "stall": headers at once, then nothing until the server stops;
- "endless": headers without a length, then `chunk` bytes every `gap` seconds for ever;
- "redirect:URL": a 302 to URL + the path.
Every request is logged as (path, behavior); `stop()` ends every transfer at once.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@dataclass
class SlowServer:
    root: Path
    behaviors: dict[str, str] = field(default_factory=dict)
    gap: float = 0.2
    chunk: int = 64
    log: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.stopped = threading.Event()
        self.httpd = _QuietServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/run/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def paths(self) -> list[str]:
        return [p for p, _ in self.log]

    def stop(self) -> None:
        self.stopped.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> SlowServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that hangs up on a trickle is what the tests do on purpose


def _handler(server: SlowServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _drip(self, data: bytes, size: int = 1) -> bool:
            """Send `data` `size` bytes at a time, `gap` apart; False once the server stops or the peer left."""
            for at in range(0, len(data), size):
                if server.stopped.wait(server.gap):
                    return False
                try:
                    self.wfile.write(data[at : at + size])
                    self.wfile.flush()
                except OSError:
                    return False
            return True

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?")[0].removeprefix("/run/")
            behavior = server.behaviors.get(path, server.behaviors.get("*", "normal"))
            server.log.append((path, behavior))
            if behavior.startswith("redirect:"):
                self.send_response(302)
                self.send_header("Location", behavior[len("redirect:") :] + path)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            file = server.root / path
            if ".." in path or not file.is_file():
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if behavior == "normal":  # streamed from the file: the server holds no whole file in memory
                self.send_response(200)
                self.send_header("Content-Length", str(file.stat().st_size))
                self.end_headers()
                with open(file, "rb") as handle:
                    try:
                        while piece := handle.read(1 << 16):
                            self.wfile.write(piece)
                    except OSError:
                        self.close_connection = True
                return
            data = file.read_bytes()
            if behavior == "endless":
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n"
                self.wfile.write(head)
                self.close_connection = True
                while self._drip(b"\x00" * server.chunk, server.chunk):
                    pass
                return
            # These close the connection after the body, so they say so (RFC 9112 section 9.6): a client that
            # took the connection as kept alive would send its next request into the closing socket.
            head = (
                f"HTTP/1.1 200 OK\r\nContent-Length: {len(data)}\r\nContent-Type: application/json\r\n"
                "Connection: close\r\n\r\n"
            )
            if behavior == "trickle-head":
                self.close_connection = True
                if self._drip(head.encode()):
                    self._drip(data)
                return
            self.wfile.write(head.encode())
            self.wfile.flush()
            if behavior == "trickle":
                self.close_connection = True
                self._drip(data)
            else:  # stall
                self.close_connection = True
                server.stopped.wait(600)

    return Handler


def serving_port(home: Path, proc: subprocess.Popen[str], timeout: float) -> tuple[int, float]:
    """(a daemon's libp2p TCP port once its status file lists it and it accepts a connection, when by
    time.monotonic()); RuntimeError if the daemon exits first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read()[-2000:] if proc.stderr is not None else ""
            raise RuntimeError(f"the daemon exited early ({proc.returncode}): {err}")
        try:
            listen = json.loads((home / "status.json").read_text())["listen"]
        except (FileNotFoundError, ValueError, KeyError):
            listen = []
        for addr in listen:
            parts = addr.split("/")
            if "tcp" in parts:
                port = int(parts[parts.index("tcp") + 1])
                with socket.create_connection(("127.0.0.1", port), timeout=2.0):
                    return port, time.monotonic()
        time.sleep(0.05)
    raise RuntimeError(f"the daemon did not serve peers within {timeout:.0f} s")
