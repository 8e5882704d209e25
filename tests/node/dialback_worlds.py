"""Run inside a fresh network namespace (test_dialback_answers.py starts it under `unshare --net`).

One dial-back server asks to dial the same address, /ip4/192.0.2.1/tcp/4001, in five worlds built in
turn in this namespace: nothing listens there (closed: a reset at once), a TCP server that speaks
HTTP listens there (something else), a p2paudit node with the requester's key listens there
(reached), an nftables rule drops every packet to it (filtered: no answer ever), and the address
is gone and no route leads to it (unroutable: an error at once). Prints one JSON
line: per world the answer's hex and the seconds (trio's clock) the server took to give it.

Only 192.0.2.0/24 (RFC 5737) is used, inside a namespace nothing else shares.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import trio

from p2paudit.identity import identity_from_seed, peer_id_of
from p2paudit.node.net import NodeConfig, ReachConfig, open_node
from p2paudit.node.net._dialback import DialbackServer, encode_request

TARGET_IP, PORT = "192.0.2.1", 4001
QUIET = ReachConfig(dialback=False, hole_punch=False)
REQUESTER = identity_from_seed(b"\x51" * 32)
TABLE = "dialback_worlds"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def nft(command: str) -> None:
    subprocess.run(["nft", command], check=True, capture_output=True, timeout=10)


def speak_http() -> socket.socket:
    """A TCP server at the target that answers every connection with an HTTP error and closes."""
    server = socket.create_server((TARGET_IP, PORT))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the world is over
                return
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    return server


async def ask(node, timeout: float) -> tuple[str, float]:
    """The server's answer to "dial me back at the target", and how long it took to give it."""
    server = DialbackServer(node.host, lambda _peer: [TARGET_IP], timeout)  # a fresh one: one ask per minute
    began = trio.current_time()
    answer = await server.serve(peer_id_of(REQUESTER.public_key), encode_request(f"/ip4/0.0.0.0/tcp/{PORT}"))
    return answer.hex(), trio.current_time() - began


async def main(timeout: float) -> dict:
    ip("link", "set", "lo", "up")
    ip("addr", "add", f"{TARGET_IP}/32", "dev", "lo")
    out = {}
    listen = NodeConfig(listen=("/ip4/127.0.0.1/tcp/0",), reach=QUIET)
    async with open_node(identity_from_seed(b"\x50" * 32), listen) as node:
        out["closed"] = await ask(node, timeout)
        http = speak_http()
        try:
            out["other protocol"] = await ask(node, timeout)
        finally:
            http.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept(), so the port is free again
            http.close()
        at_target = NodeConfig(listen=(f"/ip4/{TARGET_IP}/tcp/{PORT}",), reach=QUIET)
        async with open_node(REQUESTER, at_target):
            out["reached"] = await ask(node, timeout)
        nft(f"add table inet {TABLE}")
        nft(f"add chain inet {TABLE} input {{ type filter hook input priority 0; }}")
        nft(f"add rule inet {TABLE} input ip daddr {TARGET_IP} tcp dport {PORT} drop")
        out["filtered"] = await ask(node, timeout)
        nft(f"delete table inet {TABLE}")
        ip("addr", "del", f"{TARGET_IP}/32", "dev", "lo")
        out["unroutable"] = await ask(node, timeout)
    return out


if __name__ == "__main__":
    print(json.dumps(trio.run(main, float(sys.argv[1]))), flush=True)
