"""Experiment: does py-libp2p's AutoNAT tell a public node it is reachable and a home node it is not?

    sudo .venv/bin/python tests/netns/experiments/autonat.py

pub0 runs AutoNAT v1's server (`AutoNATService(host, serve=True)`) and a dial-back that really
dials (p2pnode.DIALBACK). pub1 (public) and home0 (behind NAT) each ask both, first with their
listen addresses, then with the address pub0 observed them at (identify). The ground truth comes
from a plain TCP connect from pub0 to each address asked about. Prints one JSON summary; exits 0
when the real dial-back agreed with the ground truth for every address; ends within 60 s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from orchestra import Clock, Fabric, deadline, relay_addr, require, start

PROBE = str(Path(__file__).resolve().parent.parent / "tcp_probe.py")
SERVER, PUBLIC_CLIENT, HOME_CLIENT = 1, 4, 5


def run() -> dict:
    clock = Clock()
    summary: dict = {}
    with Fabric(homes=1, public=2) as net:
        pub0, pub1, home0 = net.node("pub0"), net.node("pub1"), net.node("home0")
        server = start(net, pub0, "relay", SERVER, "--duration", "45", "--max-conns", "3")
        ready = server.wait("ready", 20)
        require(ready is not None, "AutoNAT server did not start", server)
        addr = relay_addr(net, pub0, ready["peer"])
        linger = ["--linger", "30"]  # the clients keep listening while the ground truth is checked
        clients = {
            "public": start(net, pub1, "autonat", PUBLIC_CLIENT, "--relay", addr, "--duration", "40", *linger),
            "home": start(net, home0, "autonat", HOME_CLIENT, "--relay", addr, "--duration", "40", *linger),
        }
        for kind, client in clients.items():
            require(client.wait("done", 40) is not None, f"{kind} client did not finish", server, client)
            answers = []
            for event in client.events("autonat"):
                answers.append({k: event.get(k) for k in ("label", "ok", "status", "sent", "dialed", "error")})
            dialbacks = client.events("dialback")
            for dialback in dialbacks:
                dialback["truth"] = _reachable(net, pub0, dialback["addr"])
            summary[kind] = {
                "autonat": answers,
                "autonat_status": client.events("autonat_status"),
                "dialback": dialbacks,
            }
            client.proc.terminate()
    summary["seconds"] = clock()
    return summary


def _reachable(net: Fabric, src, addr: str) -> bool:
    """Ground truth: does a fresh TCP connection from `src` to the address get through?"""
    parts = addr.strip("/").split("/")
    ip, port = parts[1], parts[3]
    done = net.python(src, [PROBE, "connect", ip, port, "2"], timeout=20, check=False)
    return done.stdout.startswith("OK")


def main() -> int:
    with deadline():
        summary = run()
    print(json.dumps(summary, indent=1))
    agree = [d["ok"] == d["truth"] for kind in ("public", "home") for d in summary[kind]["dialback"]]
    return 0 if agree and all(agree) else 1


if __name__ == "__main__":
    sys.exit(main())
