"""One p2paudit node (the libp2p adapter, no daemon) inside a fabric namespace, for test_reach.py.

Serves /p2paudit-test/echo/1.0.0 and, every second, sends an echo request to each connected peer other
than its bootstrap peers. Every 0.5 s it prints one line `STATUS <json>`: its peer id, its reachability
(Node.reachability()) and how many echoes each peer answered. Ends by itself after --duration seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys

import trio

from p2paudit.errors import NetworkError
from p2paudit.identity import identity_from_seed
from p2paudit.node.net import NodeConfig, ReachConfig, open_node

ECHO = "/p2paudit-test/echo/1.0.0"


def seed_identity(seed: int):
    return identity_from_seed(hashlib.sha256(f"p2paudit/netns-reach/{seed}".encode()).digest())


async def echo(peer: str, request: bytes) -> bytes:
    return request[::-1]


def refuse(reason: str) -> bytes:
    return b"!" + reason.encode()


async def main(args: argparse.Namespace) -> None:
    reach = ReachConfig(
        announce=tuple(args.announce),
        relay_service=args.relay_service,
        hole_punch=not args.no_hole_punch,
        reserve_after_unknown=args.reserve_after,
    )
    config = NodeConfig(
        listen=(args.listen,),
        bootstrap=tuple(args.bootstrap),
        peer_exchange_interval=1.0,
        peer_exchange_max_interval=4.0,
        reach=reach,
    )
    answered: dict[str, int] = {}
    bootstrap = {a.rsplit("/p2p/", 1)[-1] for a in args.bootstrap}
    with trio.move_on_after(args.duration):
        async with open_node(seed_identity(args.seed), config) as node:
            node.set_handler(ECHO, echo, max_request=64, max_response=64, timeout=5.0, refuse=refuse)
            tick = 0
            while True:
                await trio.sleep(0.5)
                tick += 1
                if tick % 2 == 0:
                    for peer in node.connected_peers():
                        if peer in bootstrap:
                            continue
                        try:
                            back = await node.request(peer, ECHO, b"ping", max_response=64, timeout=5.0)
                            answered[peer] = answered.get(peer, 0) + (back == b"gnip")
                        except NetworkError as error:
                            print(f"ECHO-FAILED {peer} {error}", flush=True)
                status = {"peer": node.peer_id, "reach": node.reachability().to_dict(), "echoed": answered}
                print("STATUS " + json.dumps(status, sort_keys=True), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--listen", default="/ip4/0.0.0.0/tcp/4001")
    parser.add_argument("--announce", action="append", default=[])
    parser.add_argument("--bootstrap", action="append", default=[])
    parser.add_argument("--relay-service", action="store_true")
    parser.add_argument("--no-hole-punch", action="store_true")
    parser.add_argument("--reserve-after", type=float, default=120.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--id", action="store_true", help="print the peer id for --seed and exit")
    parsed = parser.parse_args()
    if parsed.id:
        from p2paudit.identity import peer_id_of

        print(peer_id_of(seed_identity(parsed.seed).public_key))
        sys.exit(0)
    logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="LOG %(name)s %(levelname)s %(message)s")
    logging.getLogger("p2paudit").setLevel(logging.INFO)
    trio.run(main, parsed)
