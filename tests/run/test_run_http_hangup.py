"""A server that hangs up on a kept-alive connection just as the next request arrives (it answered the
connection's first request without `Connection: close`): the fetch asks once more on a new connection
(p2paudit/run/run_http.py, RunHttp._send). A server that hangs up on every request is still one line of
error, after exactly two tries. A raw-socket server, so the hang-up comes exactly where the test puts it."""

from __future__ import annotations

import socket
import threading

import pytest

from p2paudit.errors import InputError
from p2paudit.run.run_http import RunHttp

BODY = b'{"ok": true}'


class HangUpServer:
    """Each connection: answer its first request (kept alive) unless `always`, then read the next request
    and close without a word."""

    def __init__(self, always: bool) -> None:
        self.always = always
        self.connections = 0
        self.requests = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read_request(self, conn: socket.socket) -> bool:
        data = b""
        while b"\r\n\r\n" not in data:
            piece = conn.recv(4096)
            if not piece:
                return False
            data += piece
        self.requests += 1
        return True

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            if not self.always:
                if not self._read_request(conn):
                    return
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(BODY), BODY))
            self._read_request(conn)  # the next request on this connection: no answer, the socket closes

    def close(self) -> None:
        self.sock.close()


def test_a_hang_up_on_a_kept_alive_connection_is_asked_again_on_a_new_one():
    server = HangUpServer(always=False)
    http = RunHttp(f"http://127.0.0.1:{server.port}/run/")
    try:
        assert http.fetch_small("manifest.json", 1000) == BODY
        assert http.fetch_small("signature.json", 1000) == BODY  # its first try met the hang-up
    finally:
        http.close()
        server.close()
    assert (server.connections, server.requests) == (2, 3)


def test_a_server_that_always_hangs_up_is_one_line_after_two_tries():
    server = HangUpServer(always=True)
    http = RunHttp(f"http://127.0.0.1:{server.port}/run/")
    try:
        with pytest.raises(InputError, match=r"manifest\.json: RemoteProtocolError") as caught:
            http.fetch_small("manifest.json", 1000)
    finally:
        http.close()
        server.close()
    assert "\n" not in str(caught.value)
    assert (server.connections, server.requests) == (2, 2)
