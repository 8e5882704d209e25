"""The explorer's HTTP server: GET only, the JSON API under /api/v1/ and the pages shipped in static/.

- Every method but GET is answered 405 (Allow: GET); there is no write endpoint.
- Static files are served only by exact name from the list of files shipped in
  the package (read once at start): no path is ever joined with a request, so
  `..`, encoded or not, finds nothing.
- Pages are fixed files: nothing from the ledger is ever put into HTML by the
  server; the pages fetch JSON and build their DOM with textContent.
- Headers: a Content-Security-Policy that allows only this origin's scripts,
  styles and fetches (no inline script, no eval, no frames), nosniff, no referrer.
- When listening on loopback, a request whose Host header names another host
  is refused (421): a web page elsewhere cannot reach the API by DNS rebinding.
- Bounded (explorer.connections): a connection waits for its request head without a thread and is
  closed if the head is not whole within a few seconds; a fixed pool of threads answers complete requests.
- Every refusal is one line of JSON with its status: a malformed path or query is 400 (query_text), and
  http.server's own refusals (a request line too long, a bad version) are JSON too, never an HTML page.
  An error of ours is one line in the log (500), never a traceback per request.
"""

from __future__ import annotations

import io
import ipaddress
import socket
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from p2paudit.errors import InputError
from p2paudit.explorer import connections
from p2paudit.explorer.api import PREFIX, Answer, Explorer, json_answer
from p2paudit.explorer.connections import Gatherer
from p2paudit.explorer.query_text import decode_part, parse_query

DEFAULT_LISTEN = "127.0.0.1:8321"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}
SECURITY_HEADERS = (
    (
        "Content-Security-Policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)


def load_static() -> dict[str, tuple[str, bytes]]:
    """Every shipped page and asset by its URL path ("/run.html", "/static/app.js"), read once."""
    files: dict[str, tuple[str, bytes]] = {}
    root = resources.files("p2paudit.explorer") / "static"
    for item in root.iterdir():
        suffix = Path(item.name).suffix
        if item.is_file() and suffix in CONTENT_TYPES:
            path = f"/{item.name}" if suffix == ".html" else f"/static/{item.name}"
            files[path] = (CONTENT_TYPES[suffix], item.read_bytes())
    files["/"] = files["/index.html"]
    return files


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets) -> (host, port); InputError naming what is wrong."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InputError(f"listen address {text[:80]!r} is not HOST:PORT with a port 0..65535")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise InputError(f"listen address {text[:80]!r}: {host[:60]!r} is not an IP address or localhost") from None
    return host, int(port)


def is_loopback(host: str) -> bool:
    return host == "localhost" or ipaddress.ip_address(host).is_loopback


class ExplorerServer(HTTPServer):
    """An HTTP server holding the API (`explorer`) and the static files, serving through a Gatherer:
    a bounded number of threads whatever the number of connections (explorer.connections)."""

    request_queue_size = 128  # the listen backlog

    def __init__(self, address: tuple[str, int], explorer: Explorer, log: Callable[[str], None] | None = None) -> None:
        self.address_family = _family(address[0])
        super().__init__(address, ExplorerHandler)
        self.explorer = explorer
        self.static = load_static()
        self.log = log
        self.loopback = is_loopback(address[0])
        self.warming: threading.Thread | None = None
        self.gatherer = Gatherer(self._serve)
        self.gatherer.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """The serve loop hands each accepted connection to the gatherer (no thread of its own)."""
        self.gatherer.add(request, client_address)

    def _serve(self, sock: socket.socket, client_address: Any, head: bytes) -> None:
        """On a worker: answer the request whose head was gathered, then close the connection."""
        try:
            ExplorerHandler(sock, client_address, self, head)
        except Exception:
            self.handle_error(sock, client_address)
        finally:
            self.shutdown_request(sock)

    def server_close(self) -> None:
        super().server_close()
        self.gatherer.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer is no error of ours; anything else is one line in the log
        (or on stderr without one), never a traceback per request."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        line = f"error answering {client_address}: {type(error).__name__}: {' '.join(str(error).split())[:200]}"
        if self.log is not None:
            self.log(line)
        else:
            sys.stderr.write(line + "\n")

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host if isinstance(host, str) else bytes(host).decode("ascii")  # AF_INET(6): always str
        return f"http://{f'[{name}]' if ':' in name else name}:{port}/"

    def allowed_host(self, header: str | None) -> bool:
        """Only loopback names (or none) reach a loopback server: no DNS rebinding."""
        if not self.loopback or header is None:
            return True
        host = urllib.parse.urlsplit(f"//{header}").hostname or ""
        return host == "localhost" or _is_ip_loopback(host)


def _is_ip_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class ExplorerHandler(BaseHTTPRequestHandler):
    """Answers one request whose head the gatherer already read (`head`): it parses that, not the socket."""

    server: ExplorerServer
    server_version = "p2paudit-explorer"
    sys_version = ""
    default_request_version = "HTTP/1.0"  # every answer has a status line and headers, even to HTTP/0.9 or junk

    def __init__(self, request: Any, client_address: Any, server: ExplorerServer, head: bytes = b"") -> None:
        self.head = head
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        super().setup()
        self.rfile = io.BytesIO(self.head)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (request line too long, bad syntax or version) as one line of JSON."""
        self.close_connection = True
        text = message or self.responses.get(code, ("refused",))[0]
        self._send(json_answer({"error": " ".join(str(text).split())[:200]}, code))

    def do_GET(self) -> None:  # noqa: N802 (the name http.server dispatches to)
        try:
            self._get()
        except Exception as exc:
            self._send(json_answer({"error": f"internal error (a bug in p2paudit): {type(exc).__name__}"}, 500))
            raise  # to handle_error: one line in the log

    def _get(self) -> None:
        if not self.server.allowed_host(self.headers.get("Host")):
            self._send(json_answer({"error": "this explorer answers only requests addressed to loopback"}, 421))
            return
        parts = urllib.parse.urlsplit(self.path)
        try:
            path = decode_part(parts.path, "path")
            params = parse_query(parts.query)
        except InputError as exc:
            self._send(json_answer({"error": str(exc)}, 400))
            return
        if path == PREFIX or path.startswith(PREFIX + "/"):
            self._send(self.server.explorer.answer(path[len(PREFIX) :], params), api=True)
            return
        found = self.server.static.get(path)
        if found is None:
            self._send(Answer(404, "text/plain; charset=utf-8", b"not found\n"))
            return
        self._send(Answer(200, found[0], found[1]))

    def _refuse(self) -> None:
        self._send(
            Answer(
                405,
                "text/plain; charset=utf-8",
                b"method not allowed: this explorer is read-only\n",
                (("Allow", "GET"),),
            )
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # every other method, known or not: 405, never 501
            return self._refuse
        raise AttributeError(name)

    def _send(self, answer: Answer, api: bool = False) -> None:
        self.send_response(answer.status)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(answer.body)))
        self.send_header("Cache-Control", "no-store" if api else "no-cache")
        for name, value in (*SECURITY_HEADERS, *answer.headers):
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            write_by(self.connection, answer.body, time.monotonic() + connections.ANSWER_DEADLINE_S)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
        if self.server.log is not None:
            self.server.log(format % args)


def write_by(sock: socket.socket, body: bytes, deadline: float) -> None:
    """Send `body` by `deadline` (monotonic) or raise TimeoutError: a client that reads its answer a byte at a
    time holds a worker until the deadline, not for as long as it keeps each send making progress."""
    view = memoryview(body)
    while view:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"answer not taken within {connections.ANSWER_DEADLINE_S:.0f} s")
        sock.settimeout(min(left, connections.SEND_TIMEOUT_S))
        sent = sock.send(view[:65_536])
        view = view[sent:]


def start_in_thread(server: ExplorerServer) -> threading.Thread:
    """Serve in a daemon thread (the daemon's --http); stop with server.shutdown()."""
    thread = threading.Thread(target=server.serve_forever, name="p2paudit-explorer", daemon=True)
    thread.start()
    return thread


def make_server(
    listen: str,
    ledger_path: Path,
    status_path: Path | None = None,
    log: Callable[[str], None] | None = None,
    saved: object = None,
) -> ExplorerServer:
    """A server bound to `listen` (HOST:PORT) over the ledger file; InputError for a bad or busy address.

    `saved`: what `Explorer.overviews.saved` gave a previous server (JSON values), taken back before the
    first request where it is still true of this ledger (explorer.overview)."""
    host, port = parse_listen(listen)
    explorer = Explorer(ledger_path, status_path)
    try:
        server = ExplorerServer((host, port), explorer, log)
    except OSError as exc:
        raise InputError(f"cannot listen on {listen}: {exc.strerror or exc}") from None
    if saved is not None:
        explorer.overviews.restore_from(saved)
    server.warming = explorer.overviews.warm_in_background()  # every run's overview, before a page asks for it
    return server
