"""Bounded serving: connections wait for their request without a thread; complete requests go to a fixed pool.

A thread per connection (http.server's ThreadingHTTPServer) lets anybody who opens sockets make the
process start threads without limit, and a client that sends nothing holds its thread for ever. Here:

- One thread (the gatherer) holds every accepted connection in a selector and reads its request head
  without blocking, until the blank line that ends it. A connection that has not sent a whole head
  HEAD_DEADLINE_S after it was accepted (idle, or trickling) is closed; so is one whose head passes
  MAX_HEAD bytes (answered 431), and a new one beyond MAX_WAITING held at once (answered 503). A refused
  connection is drained for up to DRAIN_S before it is closed, so the refusal reaches the client (closing
  with its request unread would reset the connection); past MAX_DRAINING of those, it is just closed.
- A complete head goes to a pool of WORKERS threads, which parse and answer it; at most MAX_QUEUED
  wait for a worker (more are answered 503). Writing an answer is bounded by SEND_TIMEOUT_S per send
  and by ANSWER_DEADLINE_S in all (server.write_by): a client that reads slowly frees its worker too.

So the threads of the process are these, whatever the number of connections: the serve loop, the
gatherer, and at most WORKERS workers.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

HEAD_DEADLINE_S = 5.0  # a whole request head within this of the connection being accepted
SEND_TIMEOUT_S = 5.0
ANSWER_DEADLINE_S = 30.0  # a whole answer taken by the client within this, however it trickles its reads
MAX_HEAD = 65_536 + 16_384  # http.server's request line limit, plus headers
MAX_WAITING = 1024  # connections held while they send their head
MAX_DRAINING = 256  # refused connections held open at once to deliver their refusal (beyond: just closed)
DRAIN_S = 2.0  # how long a refused connection is drained before it is closed
WORKERS = 8
MAX_QUEUED = 64  # complete requests waiting for a worker
_TICK_S = 0.25  # how often the gatherer looks for expired connections


def plain_answer(status: str, text: str) -> bytes:
    """A whole HTTP/1.0 answer with a one-line JSON error, for refusals made before any handler runs."""
    body = ('{"error":"' + text + '"}').encode("ascii")
    head = f"HTTP/1.0 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    return (head + "Connection: close\r\n\r\n").encode("ascii") + body


REFUSE_BUSY = plain_answer("503 Service Unavailable", "this explorer is serving as many connections as it takes")
REFUSE_HEAD = plain_answer("431 Request Header Fields Too Large", f"request head over {MAX_HEAD} bytes")


@dataclass
class _Waiting:
    sock: socket.socket
    address: object
    deadline: float
    head: bytearray = field(default_factory=bytearray)
    refusal: bytes | None = None  # set: answered with it, then drained until the client closes (or DRAIN_S)


def _send_refusal(sock: socket.socket, answer: bytes) -> None:
    """Send a refusal and end our side; the socket stays open to be drained: closing it with the client's
    request unread would reset the connection and could destroy the answer before the client reads it."""
    try:
        sock.send(answer)  # non-blocking, best effort: a client that does not read loses it, never a thread
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


class Gatherer:
    """Holds connections until their request head is whole, then calls `serve(sock, address, head)` on a
    worker. `start()` once; `close()` stops it and closes what it holds."""

    def __init__(self, serve: Callable[[socket.socket, object, bytes], None]) -> None:
        self._serve = serve
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._new: list[_Waiting] = []
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="explorer-worker")
        self._queued = threading.BoundedSemaphore(MAX_QUEUED + WORKERS)
        self._held = 0  # connections sending their head
        self._draining = 0  # refused connections drained before they are closed
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="explorer-gatherer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add(self, sock: socket.socket, address: object) -> None:
        """Take an accepted connection (from the serve loop): hold it; past MAX_WAITING, refuse it (503) and
        drain it, or, past MAX_DRAINING refusals at once as well, close it."""
        now = time.monotonic()
        with self._lock:
            if self._closed:
                waiting = None
            elif self._held < MAX_WAITING:
                self._held += 1
                waiting = _Waiting(sock, address, now + HEAD_DEADLINE_S)
            elif self._draining < MAX_DRAINING:
                self._draining += 1
                waiting = _Waiting(sock, address, now + DRAIN_S, refusal=REFUSE_BUSY)
            else:
                waiting = None
            if waiting is not None:
                self._new.append(waiting)
        if waiting is None:
            sock.close()
            return
        try:
            self._wake_w.send(b"\0")
        except OSError:  # closed meanwhile: close() closes what it holds
            pass

    def _run(self) -> None:
        while not self._closed:
            for key, _ in self._selector.select(_TICK_S):
                if key.data is None:
                    self._take_new()
                else:
                    self._read(key.data)
            self._expire(time.monotonic())

    def _take_new(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            new, self._new = self._new, []
        for waiting in new:
            waiting.sock.setblocking(False)
            if waiting.refusal is not None:
                _send_refusal(waiting.sock, waiting.refusal)
            self._selector.register(waiting.sock, selectors.EVENT_READ, waiting)

    def _drop(self, waiting: _Waiting) -> None:
        """Stop holding a connection and close it."""
        self._selector.unregister(waiting.sock)
        with self._lock:
            if waiting.refusal is None:
                self._held -= 1
            else:
                self._draining -= 1
        waiting.sock.close()

    def _refuse(self, waiting: _Waiting, answer: bytes) -> None:
        """A held connection refused after all (its head too long): answered, then drained like the others."""
        with self._lock:
            self._held -= 1
            self._draining += 1
        waiting.refusal, waiting.deadline = answer, time.monotonic() + DRAIN_S
        _send_refusal(waiting.sock, answer)

    def _read(self, waiting: _Waiting) -> None:
        try:
            data = waiting.sock.recv(16_384)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the client hung up (before a whole head, or after reading its refusal)
            self._drop(waiting)
            return
        if waiting.refusal is not None:
            return  # drained: what a refused client still sends is read and dropped
        waiting.head += data
        if b"\r\n\r\n" in waiting.head or b"\n\n" in waiting.head:
            self._selector.unregister(waiting.sock)
            with self._lock:
                self._held -= 1
            self._dispatch(waiting)
        elif len(waiting.head) > MAX_HEAD:
            self._refuse(waiting, REFUSE_HEAD)

    def _dispatch(self, waiting: _Waiting) -> None:
        if not self._queued.acquire(blocking=False):  # every worker busy and MAX_QUEUED waiting: refused
            with self._lock:
                self._draining += 1
            waiting.refusal, waiting.deadline = REFUSE_BUSY, time.monotonic() + DRAIN_S
            _send_refusal(waiting.sock, REFUSE_BUSY)
            self._selector.register(waiting.sock, selectors.EVENT_READ, waiting)
            return
        waiting.sock.setblocking(True)
        waiting.sock.settimeout(SEND_TIMEOUT_S)

        def work() -> None:
            try:
                self._serve(waiting.sock, waiting.address, bytes(waiting.head))
            finally:
                self._queued.release()

        self._pool.submit(work)

    def _expire(self, now: float) -> None:
        for key in list(self._selector.get_map().values()):
            if key.data is not None and key.data.deadline <= now:
                self._drop(key.data)  # idle or trickling: closed without an answer, as a timed-out read would be

    def held(self) -> int:
        """Connections held now while they send their head."""
        with self._lock:
            return self._held

    def close(self) -> None:
        self._closed = True
        self._wake_w.send(b"\0")
        if self._thread.is_alive():
            self._thread.join()
        for key in list(self._selector.get_map().values()):
            if key.data is not None:
                key.data.sock.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        self._pool.shutdown(wait=True)
