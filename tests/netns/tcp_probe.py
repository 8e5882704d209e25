"""A tiny TCP server and client for probing the namespace fabric (run inside a namespace).

python tcp_probe.py server PORT            prints "READY", then answers every connection with
                                           "SEEN <ip> <port>\\n" (the source it saw) and closes
python tcp_probe.py client IP PORT TIMEOUT [SOURCE_PORT]
                                           prints "OK <answer>" and exits 0, or "FAIL <error>"
                                           and exits 1 (refused, unreachable, timed out)
"""

from __future__ import annotations

import socket
import sys


def serve(port: int) -> None:
    with socket.create_server(("0.0.0.0", port), reuse_port=True) as server:
        print("READY", flush=True)
        while True:
            conn, (ip, src_port) = server.accept()
            with conn:
                conn.sendall(f"SEEN {ip} {src_port}\n".encode())


def probe(ip: str, port: int, timeout: float, source_port: int = 0, read: bool = True) -> int:
    try:
        with socket.create_connection((ip, port), timeout=timeout, source_address=("", source_port)) as conn:
            answer = conn.makefile().readline().strip() if read else "connected"
    except OSError as error:
        print(f"FAIL {type(error).__name__}: {error}", flush=True)
        return 1
    print(f"OK {answer}", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["server"] and len(argv) == 2:
        serve(int(argv[1]))
        return 0
    if argv[:1] == ["client"] and len(argv) in (4, 5):
        return probe(argv[1], int(argv[2]), float(argv[3]), int(argv[4]) if len(argv) == 5 else 0)
    if argv[:1] == ["connect"] and len(argv) == 4:
        return probe(argv[1], int(argv[2]), float(argv[3]), read=False)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
