"""Experiment: what py-libp2p's relay v2 limits do (reservations, data and duration per circuit).

    sudo .venv/bin/python tests/netns/experiments/relay_limits.py

pub0 runs a relay with max_reservations=3, 256 KiB per circuit, 6 s per circuit. home1 reserves
(1 of 3). home0 reserves for itself and then for made-up peer ids (the relay takes the id from the
message). pub1 then asks for a reservation of its own. Last, home0 dials pub1 (no reservation),
then home1 twice: a 1 MiB echo against the 256 KiB cap, and an echo after the 6 s cap lapsed.
Prints one JSON summary; exits 0; ends within 60 s.
"""

from __future__ import annotations

import json
import sys

from orchestra import Clock, Fabric, deadline, relay_addr, require, start
from p2pnode import peer_id_for

RELAY, PROBER, LISTENER, SQUATTER, LATECOMER = 1, 2, 3, 6, 7
CIRCUIT_BYTES, CIRCUIT_SECONDS, MAX_RESERVATIONS = 256 * 1024, 6, 3


def run() -> dict:
    clock = Clock()
    summary: dict = {"limits": {"max_reservations": MAX_RESERVATIONS, "circuit_bytes": CIRCUIT_BYTES}}
    summary["limits"]["circuit_seconds"] = CIRCUIT_SECONDS
    with Fabric(homes=2, public=2) as net:
        pub0, pub1, home0, home1 = (net.node(n) for n in ("pub0", "pub1", "home0", "home1"))
        relay_args = ["--max-reservations", str(MAX_RESERVATIONS), "--circuit-bytes", str(CIRCUIT_BYTES)]
        relay_args += ["--circuit-seconds", str(CIRCUIT_SECONDS), "--max-conns", "3", "--duration", "55"]
        relay = start(net, pub0, "relay", RELAY, *relay_args)
        ready = relay.wait("ready", 20)
        require(ready is not None, "relay did not start", relay)
        addr = relay_addr(net, pub0, ready["peer"])
        quiet = ["--rounds", "0", "--bulk", "0", "--duration", "50"]
        listener = start(net, home1, "listen", LISTENER, "--relay", addr, *quiet)
        summary["listener_reserved"] = listener.wait("reserved", 20)
        squatter = start(net, home0, "reserve", SQUATTER, "--relay", addr, "--squat", "3", "--linger", "30")
        require(squatter.wait("done", 20) is not None, "squatter did not finish", relay, squatter)
        summary["squatter_answers"] = squatter.events("reserve_answer")
        squatter.proc.terminate()
        latecomer = start(net, pub1, "listen", LATECOMER, "--relay", addr, *quiet)
        summary["latecomer_reserved"] = latecomer.wait("reserved", 20)
        summary["relay_reservations"] = (relay.latest("relay_state") or {}).get("reservations")
        prober = start(
            net,
            home0,
            "limits",
            PROBER,
            "--relay",
            addr,
            "--target",
            peer_id_for(LISTENER),
            "--no-reservation-target",
            peer_id_for(LATECOMER),
            "--bulk",
            str(1 << 20),
            "--circuit-seconds",
            str(CIRCUIT_SECONDS),
            "--duration",
            "40",
        )
        require(prober.wait("done", 45) is not None, "prober did not finish", relay, listener, prober)
        summary["host_connect_circuit"] = prober.events("host_connect_circuit")
        summary["dials"] = prober.events("dialed")
        summary["echoes"] = prober.events("echo")
        summary["conns"] = prober.events("conns")
        summary["listener_errors"] = listener.events("echo_handler_error")
        summary["logs"] = {r.name: r.logs(12) for r in (relay, listener, latecomer, prober)}
    summary["seconds"] = clock()
    return summary


def main() -> int:
    with deadline():
        summary = run()
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
