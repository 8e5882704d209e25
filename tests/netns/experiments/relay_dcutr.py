"""Experiment: circuit relay v2 between two homes behind different NATs, then DCUtR.

    sudo .venv/bin/python tests/netns/experiments/relay_dcutr.py [--no-dcutr] [--nat random]
                                                                  [--max-conns N] [--bulk BYTES]

pub0 runs a relay; home1 reserves a slot on it; home0 dials home1 at
/ip4/203.0.113.10/tcp/4001/p2p/<relay>/p2p-circuit/p2p/<home1>, echoes 32-byte messages and a bulk
payload both ways (each side opens its own streams), then (with DCUtR) both watch whether the
relayed connection gains a direct one through the two NATs. Prints one JSON summary; exits 0 when
the relayed echo worked both ways, 1 otherwise; ends within 60 s.
"""

from __future__ import annotations

import argparse
import json
import sys

from orchestra import Clock, Fabric, deadline, relay_addr, require, start
from p2pnode import peer_id_for

RELAY, DIALER, LISTENER = 1, 2, 3


def run(
    dcutr: bool = True,
    nat_mapping: str = "port-preserving",
    max_conns: int = 1,
    bulk: int = 1 << 20,
    rounds: int = 50,
    watch: float = 12.0,
    dcutr_after: float = 0.0,
    hold: bool = False,
) -> dict:
    clock = Clock()
    summary: dict = {"nat_mapping": nat_mapping, "dcutr": dcutr, "max_conns_per_peer": max_conns}
    with Fabric(homes=2, public=1, nat_mapping=nat_mapping) as net:
        pub, home0, home1 = net.node("pub0"), net.node("home0"), net.node("home1")
        common = ["--max-conns", str(max_conns), "--rounds", str(rounds), "--bulk", str(bulk), "--watch", str(watch)]
        common += ["--dcutr", "--dcutr-after", str(dcutr_after)] if dcutr else []
        summary["dcutr_after_s"] = dcutr_after
        relay = start(net, pub, "relay", RELAY, "--duration", "55", "--max-conns", str(max_conns))
        ready = relay.wait("ready", 20)
        require(ready is not None, "relay did not start", relay)
        addr = relay_addr(net, pub, ready["peer"])
        listener = start(net, home1, "listen", LISTENER, "--relay", addr, "--duration", "45", *common)
        reserved = listener.wait("reserved", 20)
        require(reserved and reserved["ok"], "no reservation", relay, listener)
        summary["reservation"] = reserved
        summary["relay_connect_ms"] = {"listener": listener.events("relay_connected")[0]["ms"]}
        target = peer_id_for(LISTENER)
        hold_args = ["--hold"] if hold else []
        dialer = start(
            net, home0, "dial", DIALER, "--relay", addr, "--target", target, "--duration", "45", *common, *hold_args
        )
        roles = (relay, listener, dialer)
        summary["dialed"] = dialer.wait("dialed", 25)
        require(summary["dialed"] and summary["dialed"]["ok"], "relayed dial failed", *roles)
        summary["echo_dialer_to_listener"] = dialer.wait("echo", 25)
        summary["echo_listener_to_dialer"] = listener.wait("echo", 25)
        if dcutr:
            summary["upgrade_dialer"] = dialer.wait("upgrade", dcutr_after + watch + 10)
            summary["upgrade_listener"] = listener.wait("upgrade", dcutr_after + watch + 10)
            if hold:
                summary["held_stream"] = dialer.wait("held_stream", 10)
            if summary["upgrade_dialer"] and summary["upgrade_dialer"]["first_direct_s"] is not None:
                summary["echo_after_dcutr"] = dialer.wait("echo", 25)
        dialer.wait("done", 20)
        summary["relay_state"] = relay.latest("relay_state")
        summary["conntrack"] = {r.name: _tcp_entries(net.conntrack_entries(r)) for r in net.router_nodes}
        summary["logs"] = {r.name: r.logs(15) for r in roles}
    summary["seconds"] = clock()
    return summary


def _tcp_entries(table: str) -> list[str]:
    return [" ".join(line.split()[2:9]) for line in table.splitlines() if " tcp " in f" {line} "][:12]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-dcutr", action="store_true")
    parser.add_argument("--nat", default="port-preserving", choices=["port-preserving", "random"])
    parser.add_argument("--max-conns", type=int, default=1)
    parser.add_argument("--bulk", type=int, default=1 << 20)
    parser.add_argument(
        "--dcutr-after", type=float, default=0.0, help="start DCUtR on both this long after the circuit"
    )
    parser.add_argument("--hold", action="store_true", help="keep a stream open on the circuit across the upgrade")
    parser.add_argument("--watch", type=float, default=12.0)
    args = parser.parse_args(argv)
    with deadline():
        summary = run(
            dcutr=not args.no_dcutr,
            nat_mapping=args.nat,
            max_conns=args.max_conns,
            bulk=args.bulk,
            watch=args.watch,
            dcutr_after=args.dcutr_after,
            hold=args.hold,
        )
    print(json.dumps(summary, indent=1))
    there, back = summary.get("echo_dialer_to_listener") or {}, summary.get("echo_listener_to_dialer") or {}
    return 0 if there.get("echoed_bulk_bytes") == back.get("echoed_bulk_bytes") == args.bulk else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
