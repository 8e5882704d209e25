"""What reachability costs on loopback: connect time with 1 and 2 connections per peer, a relayed link.

- connect: a node dials another (`Node.connect`) and hangs up, --rounds times, with
  ReachConfig.connections_per_peer = 1 and = 2 (py-libp2p waits a fixed 0.25 s
  after starting a dial unless the per-peer limit is reached, docs/reachability.md);
- relay: a relay, a node holding a reservation on it and a node that dials it through
  the relay: reservation time, circuit dial time, request round trips over the circuit
  and over a direct connection.

    .venv/bin/python benchmarks/reach_bench.py [--rounds 20]

Prints one JSON object (milliseconds: median, min, max).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import AsyncExitStack

import trio

from p2paudit.identity import identity_from_seed
from p2paudit.node.net import NodeConfig, ReachConfig, RelayServiceLimits, open_node

LOOPBACK = ("/ip4/127.0.0.1/tcp/0",)
QUIET = dict(dialback=False, hole_punch=False, max_relays=0)


def _ms(samples: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(samples) * 1000, 2),
        "min": round(min(samples) * 1000, 2),
        "max": round(max(samples) * 1000, 2),
        "n": len(samples),
    }


def _config(**reach) -> NodeConfig:
    return NodeConfig(listen=LOOPBACK, peer_exchange_interval=3600, reach=ReachConfig(**{**QUIET, **reach}))


async def _echo(peer: str, request: bytes) -> bytes:
    return request


async def connect_times(per_peer: int, rounds: int) -> dict[str, float]:
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(
            open_node(identity_from_seed(b"\x01" * 32), _config(connections_per_peer=per_peer))
        )
        b = await stack.enter_async_context(
            open_node(identity_from_seed(b"\x02" * 32), _config(connections_per_peer=per_peer))
        )
        samples = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            await a.connect(b.listen_addrs()[0])
            samples.append(time.perf_counter() - t0)
            await a.host.disconnect(b.host.get_id())
            await trio.sleep(0.05)
        return _ms(samples)


async def relay_times(rounds: int) -> dict[str, dict[str, float]]:
    async with AsyncExitStack() as stack:
        relay_reach = dict(relay_service=True, relay_limits=RelayServiceLimits())
        relay = await stack.enter_async_context(open_node(identity_from_seed(b"\x03" * 32), _config(**relay_reach)))
        boot = (relay.listen_addrs()[0],)
        client = dict(max_relays=1, reserve_after_unknown=0.0)
        t0 = time.perf_counter()
        cfg = NodeConfig(
            listen=LOOPBACK, bootstrap=boot, peer_exchange_interval=3600, reach=ReachConfig(**{**QUIET, **client})
        )
        a = await stack.enter_async_context(open_node(identity_from_seed(b"\x04" * 32), cfg))
        while not a.reachability().reservations:
            await trio.sleep(0.01)
        reserved = time.perf_counter() - t0
        b = await stack.enter_async_context(open_node(identity_from_seed(b"\x05" * 32), _config()))
        for node in (a, b):
            node.set_handler("/bench/echo/1", _echo, max_request=64, max_response=64, timeout=5, refuse=str.encode)
        circuit = next(x for x in a.reachability().addresses if "/p2p-circuit" in x)
        t0 = time.perf_counter()
        await b.connect(circuit)
        dialled = time.perf_counter() - t0
        relayed = await _round_trips(b, a.peer_id, rounds)
        await b.host.disconnect(a.host.get_id())
        await b.connect(a.listen_addrs()[0])
        direct = await _round_trips(b, a.peer_id, rounds)
        return {
            "reservation_ms": round(reserved * 1000, 1),
            "circuit_dial_ms": round(dialled * 1000, 1),
            "request_rtt_relayed": relayed,
            "request_rtt_direct": direct,
        }


async def _round_trips(node, peer: str, rounds: int) -> dict[str, float]:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await node.request(peer, "/bench/echo/1", b"x" * 32)
        samples.append(time.perf_counter() - t0)
    return _ms(samples)


async def main(rounds: int) -> dict:
    return {
        "connect_1_per_peer": await connect_times(1, rounds),
        "connect_2_per_peer": await connect_times(2, rounds),
        "relay": await relay_times(rounds),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    print(json.dumps(trio.run(main, args.rounds), indent=1))
