"""A late joiner catching up from 8 peers that each hold the same 200,000 attestations (issue 13, item 7).

Peers: 8 nodes of the real libp2p adapter on 127.0.0.1, in this process,
each with its own ledger (its own origin and key) holding the same signed
attestations of one 100,000-step run in its own order, each serving
/p2paudit/reconcile/1.0.0 and /p2paudit/sync/1.0.0 from a store owned by its
own thread (node.store_owner), as the daemon does. The late joiner (a ninth
node, empty ledger) runs `reconcile.reconcile_run` against each peer in turn,
as PeerSync.sync_with does, and is timed to the last peer; every attestation
it stores has its signature checked (append_many).

Baseline in the same run: the distinct attestations' bytes, and the old
way (proved log pages, `sync.SyncSession`) from the first peer alone (the
old cost from 8 peers is 8 times that).

    python benchmarks/catchup_bench.py                    # 200,000 attestations, 8 peers
    python benchmarks/catchup_bench.py --count 20000      # quicker
    python benchmarks/catchup_bench.py --keep DIR         # build the peers' ledgers in DIR once, reuse them after

Also measured: the CPU of the whole process (the joiner and the 8 peers, which
share it) during the catch-up, and one more reconciliation with a peer once
in step (what the daemon does with every peer every 3 s).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402
from synthetic_attestations import synthetic_attestation  # noqa: E402

from p2paudit.attest.store import AttestationStore, origin_for  # noqa: E402
from p2paudit.identity import Identity, identity_from_seed  # noqa: E402
from p2paudit.node import wire  # noqa: E402
from p2paudit.node.daemon.store_owner import StoreOwner  # noqa: E402
from p2paudit.node.net import NodeConfig, open_node  # noqa: E402
from p2paudit.node.protocols import reconcile, sync

RUN = hashlib.sha256(b"catch-up benchmark run").digest()
STEPS = 100_000
LOOPBACK = NodeConfig(listen=("/ip4/127.0.0.1/tcp/0",), peer_exchange_interval=3600.0)


def key(label: str, n: int) -> Identity:
    return identity_from_seed(hashlib.sha256(b"catchup %s %d" % (label.encode(), n)).digest())


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def make_ledgers(root: Path, count: int, peers: int) -> tuple[list[Path], int]:
    """`peers` ledgers holding the same `count` attestations, each in its own order; the distinct bytes.
    Ledgers already in `root` (--keep) are reused."""
    verifiers = [key("verifier", v) for v in range(max(2, count // STEPS + 1))]
    envelopes = [synthetic_attestation(verifiers[n % len(verifiers)], RUN, n % STEPS, n).encoded for n in range(count)]
    paths = []
    for p in range(peers):
        path = root / f"peer-{p}-{count}.db"
        if path.exists():
            paths.append(path)
            continue
        order = envelopes[:]
        random.Random(p).shuffle(order)
        with AttestationStore.open(path, origin_for(key("peer", p).public_key)) as store:
            store.register_run(RUN, STEPS, "catch-up bench")
            reconcile.ensure_index(store)
            for i in range(0, len(order), 2048):
                store.append_many(order[i : i + 2048])
        paths.append(path)
    return paths, sum(len(e) for e in envelopes)


def opener(path: Path, origin: str):
    def open_it() -> AttestationStore:
        store = AttestationStore.open(path, origin)
        store.register_run(RUN, STEPS, "catch-up bench")
        reconcile.ensure_index(store)
        return store

    return open_it


async def serve_peer(p: int, path: Path, ready: list, stop: trio.Event) -> None:
    identity = key("peer", p)
    async with StoreOwner(opener(path, origin_for(identity.public_key))) as db, open_node(identity, LOOPBACK) as node:

        async def rec(peer: str, request: bytes) -> bytes:
            return await db.call(reconcile.serve, request)

        async def pages(peer: str, request: bytes) -> bytes:
            return await db.call(lambda store: sync.serve_sync(store, request, store.checkpoint(identity)))

        limits = dict(timeout=30.0)
        node.set_handler(reconcile.RECONCILE_PROTOCOL, rec, max_request=reconcile.MAX_REQUEST_BYTES,
                         max_response=reconcile.MAX_ANSWER_BYTES, refuse=reconcile.refusal, **limits)  # fmt: skip
        node.set_handler(wire.SYNC_PROTOCOL, pages, max_request=wire.MAX_SYNC_REQUEST_BYTES,
                         max_response=wire.MAX_PAGE_BYTES, refuse=wire.sync_refusal, **limits)  # fmt: skip
        ready.append(node.listen_addrs()[0])
        await stop.wait()


async def catch_up(root: Path, addrs: list[str]) -> dict:
    me = key("late", 0)
    out: dict = {}
    async with StoreOwner(opener(root / "late.db", origin_for(me.public_key))) as db, open_node(me, LOOPBACK) as node:
        peers = [await node.connect(a) for a in addrs]
        began, cpu, total = time.monotonic(), cpu_seconds(), reconcile.Reconciled()
        for peer in peers:

            async def ask(data: bytes, peer: str = peer) -> bytes:
                return await node.request(peer, reconcile.RECONCILE_PROTOCOL, data,
                                          max_response=reconcile.MAX_ANSWER_BYTES, timeout=60.0)  # fmt: skip

            done = await reconcile.reconcile_run(ask, db.call, RUN, STEPS)
            total.requests += done.requests
            total.received_bytes += done.received_bytes
            total.new += done.new
            out.setdefault("per_peer", []).append((done.requests, done.received_bytes, done.new))
        out.update(seconds=time.monotonic() - began, requests=total.requests, bytes=total.received_bytes, new=total.new)
        out.update(cpu=cpu_seconds() - cpu)
        for _ in range(2):  # in step with the last peer: the first reads the run's index once, the second not
            began = time.monotonic()
            again = await reconcile.reconcile_run(ask, db.call, RUN, STEPS)
            out.setdefault("step_seconds", []).append(time.monotonic() - began)
        out.update(step_requests=again.requests, step_bytes=again.received_bytes)
    async with (
        StoreOwner(opener(root / "old-way.db", origin_for(me.public_key))) as db,
        open_node(me, LOOPBACK) as node,
    ):
        peer = await node.connect(addrs[0])
        began, received = time.monotonic(), 0
        session = await db.call(lambda store: sync.SyncSession(store, sync.SyncCursor(store)))
        while (request := await db.call(lambda _: session.next_request())) is not None:
            answer = await node.request(
                peer, wire.SYNC_PROTOCOL, request, max_response=wire.MAX_PAGE_BYTES, timeout=60.0
            )
            received += len(answer)
            await db.call(lambda _, a=answer: session.handle_response(a))
        out.update(old_seconds=time.monotonic() - began, old_bytes=received)
    return out


async def main_async(root: Path, paths: list[Path]) -> dict:
    ready: list[str] = []
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        for p, path in enumerate(paths):
            nursery.start_soon(serve_peer, p, path, ready, stop)
        while len(ready) < len(paths):
            await trio.sleep(0.1)
        result = await catch_up(root, ready)
        stop.set()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--peers", type=int, default=8)
    parser.add_argument("--keep", type=Path, help="build the peers' ledgers here once and reuse them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        began = time.monotonic()
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
        paths, distinct = make_ledgers(args.keep or root, args.count, args.peers)
        print(
            f"built {args.peers} ledgers of {args.count:,} attestations in {time.monotonic() - began:.0f} s", flush=True
        )
        r = trio.run(main_async, root, paths)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores, python {platform.python_version()}")
    print(f"distinct attestations: {args.count:,}, {distinct:,} bytes")
    print(f"late joiner, reconciliation with {args.peers} peers: {r['seconds']:.1f} s, {r['requests']:,} requests, "
          f"{r['bytes']:,} bytes received ({r['bytes'] / distinct:.3f}x the distinct bytes), {r['new']:,} stored")  # fmt: skip
    for i, (requests, received, new) in enumerate(r["per_peer"]):
        print(f"  peer {i}: {requests:,} requests, {received:,} bytes, {new:,} new")
    print(f"  CPU of the process (the joiner and the {args.peers} peers together): {r['cpu']:.1f} s")
    first, second = (f"{t * 1000:.0f} ms" for t in r["step_seconds"])
    print(f"once in step, one more reconciliation with a peer: {first}, then {second}; "
          f"{r['step_requests']} request(s), {r['step_bytes']:,} bytes received")  # fmt: skip
    print(f"baseline, proved log pages from one peer: {r['old_seconds']:.1f} s, {r['old_bytes']:,} bytes "
          f"(from {args.peers} peers: about {args.peers * r['old_bytes']:,} bytes, "
          f"{args.peers * r['old_bytes'] / distinct:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
