"""The explorer's server is bounded: idle connections cost no thread and are closed, malformed requests are a
400 with one line of JSON, and nothing a client sends puts a traceback in the log. Real sockets throughout."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from p2paudit.explorer import connections
from p2paudit.explorer.connections import HEAD_DEADLINE_S, WORKERS
from tests.explorer.conftest import fetch
from tests.explorer.explorer_helpers import SMALL


def _connect(server) -> socket.socket:
    host, port = server.server_address[:2]
    return socket.create_connection((host, port), timeout=30)


def _raw(server, head: bytes) -> tuple[int, bytes]:
    with _connect(server) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65_536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_200_idle_connections_start_no_thread_and_a_request_is_answered(server):
    before = threading.active_count()
    idle = [_connect(server) for _ in range(200)]
    try:
        for sock in idle[::2]:
            sock.sendall(b"GET /api/v1/runs HTTP/1.0\r\n")  # half a head: a client that stopped mid-request
        # Accepted in order: once this request is answered, the 200 before it were accepted too.
        assert fetch(server, "/api/v1/runs").status == 200
        assert threading.active_count() <= before + WORKERS, threading.active_count()
    finally:
        for sock in idle:
            sock.close()


@pytest.mark.slow
@pytest.mark.serial
def test_a_trickling_client_is_closed_at_the_head_deadline_all_the_same(server):
    with _connect(server) as sock:
        began = time.monotonic()
        for byte in b"GET /api/v1/runs HTTP/1.0\r\nX-Slow: " + b"s" * 200:  # one byte every 0.1 s: 23 s in all
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # closed under us: what the server should do
                break
            if time.monotonic() - began > HEAD_DEADLINE_S + 3:
                pytest.fail("a trickling head is still held past the deadline")
            time.sleep(0.1)
        sock.settimeout(5)
        try:
            assert sock.recv(1024) == b""  # closed, no answer
        except ConnectionResetError:
            pass  # closed while our bytes were in flight: the kernel answers them with a reset
    assert time.monotonic() - began <= HEAD_DEADLINE_S + 3


def test_connections_past_the_limit_are_refused_with_503(server, monkeypatch):
    deadline = time.monotonic() + 10
    while server.gatherer.held():  # the connections earlier tests closed, dropped once the gatherer sees them go
        assert time.monotonic() < deadline, server.gatherer.held()
        time.sleep(0.02)
    monkeypatch.setattr(connections, "MAX_WAITING", 3)
    held = [_connect(server) for _ in range(3)]
    try:
        fetch(server, "/api/v1/")  # once answered, the three before it are held
        status, body = _raw(server, b"GET /api/v1/ HTTP/1.0\r\n\r\n")
        assert status == 503 and "as many connections" in json.loads(body)["error"]
    finally:
        for sock in held:
            sock.close()


@pytest.mark.slow
@pytest.mark.serial
def test_an_idle_connection_is_closed_after_the_head_deadline(server):
    with _connect(server) as sock:
        sock.sendall(b"GET /api/v1/runs HTTP/1.0\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        began = time.monotonic()
        assert sock.recv(1024) == b""  # closed by the server, no answer
        waited = time.monotonic() - began
    assert HEAD_DEADLINE_S - 0.5 <= waited <= HEAD_DEADLINE_S + 3, waited


RUN = SMALL.hex()
MALFORMED = (
    ("/api/v1/runs?" + "a=1&" * 60, "given twice"),
    ("/api/v1/runs?" + "&".join(f"p{n}=1" for n in range(60)), "more than 20 parameters"),
    ("/api/v1/runs?" + "a" * 20_000, "more than 16384"),
    ("/api/v1/runs/xyz", "run id 'xyz' is not 64 hex digits"),
    (f"/api/v1/runs/{RUN[:-1]}g/coverage", "is not 64 hex digits"),
    (f"/api/v1/runs/{RUN}/steps/-1", "step '-1' is not an integer"),
    (f"/api/v1/runs/{RUN}/steps/99999999999999999999", "is not an integer of at most 19 digits"),
    ("/api/v1/entries/x1", "entry index 'x1'"),
    (f"/api/v1/runs/{RUN}/coverage?buckets=10&bucket=5", "does not take parameter 'bucket'"),
    ("/api/v1/disputes?run=%zz", "bad percent-encoding at '%zz'"),
    ("/api/v1/disputes?run=%ff%fe", "bytes that are not UTF-8"),
    ("/api/v1/runs/%C0%80", "bytes that are not UTF-8"),
    ("/api/v1/runs?x=%", "bad percent-encoding at '%'"),
    ("/api/v1/node?verbose=1", "does not take parameter 'verbose'"),
    ("/index.html?run=%G1", "bad percent-encoding"),
)


@pytest.mark.parametrize(("target", "says"), MALFORMED)
def test_a_malformed_request_is_a_400_with_one_line(server, capfd, target, says):
    status, body = _raw(server, f"GET {target} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n".encode())
    assert status == 400, body[:200]
    assert body.count(b"\n") == 0 and says in json.loads(body)["error"]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("head", "status"),
    (
        (b"GET /api/v1/runs?" + b"a" * 70_000 + b" HTTP/1.0\r\n\r\n", 414),  # past http.server's line limit
        (b"GET /api/v1/runs HTTP/9.9\r\n\r\n", 505),
        (b"GET\r\n\r\n", 400),
        (b"GET /api/v1/runs HTTP/1.0\r\n" + b"X-Pad: " + b"p" * 90_000 + b"\r\n\r\n", 431),
    ),
)
def test_a_request_http_server_refuses_is_one_line_of_json(server, capfd, head, status):
    got, body = _raw(server, head)
    assert got == status and body.count(b"\n") == 0 and json.loads(body)["error"], body[:200]
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.serial
def test_a_slow_reader_gets_its_answer_cut_at_the_deadline():
    """write_by on a real socket whose peer reads 256 bytes every 50 ms: cut at its deadline, not held on."""
    from p2paudit.explorer.server import write_by

    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stop = threading.Event()

    def read_slowly() -> None:
        while not stop.is_set() and theirs.recv(256):
            time.sleep(0.05)

    reader = threading.Thread(target=read_slowly, daemon=True)
    reader.start()
    began = time.monotonic()
    try:
        with pytest.raises(TimeoutError):  # "answer not taken within", or the last send timing out at it
            write_by(ours, b"x" * 4_000_000, time.monotonic() + 1.0)  # at 5 KB/s: 13 minutes to take it all
        assert time.monotonic() - began < 3
    finally:
        stop.set()
        ours.close()
        reader.join(timeout=5)
        theirs.close()
