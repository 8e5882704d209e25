"""The node network under load: 10 node processes on loopback gossiping signed attestations, and history sync.

Gossip: --nodes processes (default 10), each with its own key and its own
ledger (AttestationStore in a temp dir, one run of 100,000 steps), joined by
the real libp2p adapter (every node is told only node 0's address) with the
real stateless validator (validate.validate_gossip) on the run topic. Each
node publishes pre-signed v2 attestations (signed before the timed part) at
--rate / --nodes per second for --seconds, in gossip batches (wire.batches)
every --interval seconds; like the daemon it appends its own attestations
before publishing them, and drains what arrives into its store with
append_many (daemon.gossip's GossipWork.on_batch). Measured in each node: every attestation's
arrival (stored) time, its CPU time (getrusage) idle and under load, and its
resident memory (VmRSS, ru_maxrss) idle and under load. Publish times travel
in a side channel (each node's report), clocks are the machine's.

Sync: one node holding --sync-count attestations (10,000), another node
empty; the empty one syncs over the real adapter (Node.ask on
wire.SYNC, sync.SyncSession against sync.serve_sync) as
PeerSync.sync_with does, and is timed to the last page stored.

Baselines in the same run (parent process, same machine): the Ed25519 check
alone per attestation, validate_gossip per attestation in batches, and
append_many of the same batches into a fresh store.

    python benchmarks/network_bench.py            # 10 nodes, 200 att/s, 60 s
    python benchmarks/network_bench.py --quick    # 15 s
    python benchmarks/network_bench.py --quick --profile 1   # cProfile node 1 under the load
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Run as a script from anywhere: the repository root first, so `ledger` is the package here.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import trio  # noqa: E402
from synthetic_attestations import synthetic_attestation  # noqa: E402

from p2paudit.attest.record import DOMAIN, decode_signed  # noqa: E402
from p2paudit.attest.store import AttestationStore, origin_for  # noqa: E402
from p2paudit.identity import Identity, identity_from_seed, verify_signature  # noqa: E402
from p2paudit.node import wire  # noqa: E402
from p2paudit.node.net import NodeConfig, open_node  # noqa: E402
from p2paudit.node.protocols import sync
from p2paudit.node.wire.validate import validate_gossip  # noqa: E402

RUN = hashlib.sha256(b"network benchmark run").digest()
STEPS = 100_000
TOPIC = wire.run_topic(RUN)


# -- attestations and machine facts ------------------------------------------------------------------------


def node_key(index: int) -> Identity:
    return identity_from_seed(hashlib.sha256(b"network bench key %d" % index).digest())


def make_attestation(identity: Identity, step: int, n: int) -> bytes:
    """A signed v2 attestation of `step`, made as attest_bench.py makes its records."""
    return synthetic_attestation(identity, RUN, step, n).encoded


def vm_rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def busy_cores() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))] if ordered else float("nan")


def open_store(path: Path, identity: Identity) -> AttestationStore:
    store = AttestationStore.open(path, origin_for(identity.public_key))
    store.register_run(RUN, STEPS, "network bench")
    return store


def say(tag: str, value: object = "") -> None:
    print(tag, json.dumps(value), flush=True)


async def read_line() -> str:
    return await trio.to_thread.run_sync(sys.stdin.readline)


PROFILE_GROUPS = (  # (label, substring of "file:function"), first match wins
    ("Ed25519 verify (libsodium)", "crypto_sign_open"),
    ("Ed25519 sign (libsodium)", "crypto_sign"),
    ("socket send/recv", "_socket.socket"),
    ("epoll wait", "select.epoll"),
    ("SQLite", "sqlite3"),
    ("yamux", "yamux"),
    ("noise / crypto", "noise"),
    ("pubsub", "libp2p/pubsub"),
    ("other libp2p", "libp2p/"),
    ("trio", "trio/"),
    ("msgpack / protobuf", "msgpack"),
    ("msgpack / protobuf", "protobuf"),
    ("p2paudit + ledger", "/work/main/"),
)


def profile_groups(stats: pstats.Stats) -> dict[str, float]:
    """Own time (tottime) summed by where it was spent."""
    out: dict[str, float] = {}
    for (path, _line, name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
        where = f"{path}:{name}"
        label = next((lab for lab, key in PROFILE_GROUPS if key in where), "other")
        out[label] = out.get(label, 0.0) + tottime
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


# -- one gossiping node (a child process) -------------------------------------------------------------------


async def gossip_node(a: argparse.Namespace) -> None:
    identity, n, index = node_key(a.index), a.nodes, a.index
    per_node = round(a.rate * a.seconds / n)
    # Node i attests steps i, i+n, i+2n, ...: no conflicts, all known to the run.
    mine = [make_attestation(identity, j * n + index, j * n + index) for j in range(per_node)]
    store = open_store(Path(a.workdir) / f"node{index}.db", identity)
    arrivals: dict[str, list[float]] = {}  # batch digest -> [stored at, attestations new]
    counters = {"copies": 0, "validations": 0, "fresh": 0}
    copied: set[str] = set()  # messages that reached pubsub here, whether delivered or not

    async def on_batch(peer: str, data: bytes) -> None:  # GossipWork.on_batch, minus its reporting
        appended = store.append_many(list(wire.decode_batch(data).envelopes))
        fresh = sum(1 for x in appended if x.new)
        counters["fresh"] += fresh
        arrivals[hashlib.sha256(data).hexdigest()] = [time.time(), fresh]

    def validator(origin: str, data: bytes) -> bool:
        counters["validations"] += 1
        return validate_gossip(TOPIC, data)

    boot = () if a.boot == "-" else (a.boot,)
    async with open_node(identity, NodeConfig(bootstrap=boot, peer_exchange_interval=0.5)) as node:
        pubsub = node.gossip.pubsub
        push = pubsub.push_msg

        async def counted_push(forwarder, msg):  # every copy from a peer, duplicates included
            counters["copies"] += str(forwarder) != node.peer_id
            copied.add(hashlib.sha256(msg.data).hexdigest())
            await push(forwarder, msg)

        pubsub.push_msg = counted_push
        node.set_validator(TOPIC, validator)
        await node.subscribe(TOPIC, on_batch)
        say("ADDR", node.listen_addrs()[0])
        with trio.fail_after(120):
            while len(node.connected_peers()) < n - 1 or len(node.gossip_peers(TOPIC)) < n - 1:
                await trio.sleep(0.1)
        await trio.sleep(2.5)  # two heartbeats: the mesh is grafted
        ready_cpu, ready_at = cpu_seconds(), time.monotonic()
        say("READY")
        start = float((await read_line()).split()[1])  # GO <wall time of the start>
        idle = {"cpu_per_s": (cpu_seconds() - ready_cpu) / (time.monotonic() - ready_at), "rss_kib": vm_rss_kib()}
        idle["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        rss_peak = [0]

        async def sample_rss() -> None:
            while True:
                rss_peak[0] = max(rss_peak[0], vm_rss_kib())
                await trio.sleep(0.5)

        published: list[list] = []  # [batch digest, publish time, due times]
        due = [start + (index / n) * a.interval + j * n / a.rate for j in range(per_node)]
        await trio.sleep(max(0.0, start - time.time()))
        profile = cProfile.Profile() if a.profile == index else None
        load_cpu, load_t = cpu_seconds(), time.time()
        if profile:
            profile.enable()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample_rss)
            sent, tick = 0, 0
            while sent < per_node:
                tick += 1
                await trio.sleep(max(0.0, start + (index / n) * a.interval + tick * a.interval - time.time()))
                now = time.time()
                upto = sent
                while upto < per_node and due[upto] <= now:
                    upto += 1
                if upto == sent:
                    continue
                store.append_many(mine[sent:upto])  # the daemon records its own before gossiping them
                for message in wire.batches(RUN, mine[sent:upto]):
                    mesh = len(node.gossip.router.mesh.get(TOPIC, ()))  # to explain a message nobody got
                    published.append([hashlib.sha256(message).hexdigest(), time.time(), due[sent:upto], mesh])
                    await node.publish(TOPIC, message)
                sent = upto
            with trio.move_on_after(a.drain):
                while store.ledger.size < per_node * n:
                    await trio.sleep(0.05)
            load_s = time.time() - load_t
            nursery.cancel_scope.cancel()
        await trio.sleep(1.0)
        # A check: RPCs still waiting in py-libp2p's per-peer send queues a second after the load (want none).
        queued = {str(p)[-6:]: len(q) for p, q in pubsub.peer_queues.items() if len(q)}
        if profile:
            profile.disable()
        load = {"cpu": cpu_seconds() - load_cpu, "seconds": load_s, "rss_kib": vm_rss_kib()}
        load["rss_peak_kib"] = max(rss_peak[0], load["rss_kib"])
        load["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        report = {
            "index": index,
            "per_node": per_node,
            "ledger_size": store.ledger.size,
            "published": published,
            "arrivals": arrivals,
            "idle": idle,
            "load": load,
            "counters": counters,
            "stats": node.stats,
            "peers": len(node.connected_peers()),
            "reached_not_stored": sorted(copied - set(arrivals)),
            "queued": queued,
        }
        if profile:
            text = io.StringIO()
            stats = pstats.Stats(profile, stream=text)
            stats.sort_stats("tottime").print_stats(25)
            report["profile"] = text.getvalue()
            report["profile_groups"] = profile_groups(stats)
        # The report goes to a file: a report of 100+ KB printed to a pipe the parent is not reading yet
        # blocks this whole event loop, and with it the sending of our last messages.
        path = Path(a.workdir) / f"report{index}.json"
        path.write_text(json.dumps(report))
        say("RESULT", str(path))
        # Stay up until every node is done: a node that closes at once drops the messages still in its
        # send queues, and resets streams its slower peers have not read yet.
        await read_line()
    store.close()


# -- sync: a full node and an empty one ---------------------------------------------------------------------


async def sync_server(a: argparse.Namespace) -> None:
    identity = node_key(1000)
    keys = [node_key(2000 + k) for k in range(16)]
    items = [make_attestation(keys[n % 16], n // 16, n) for n in range(a.sync_count)]
    store = open_store(Path(a.workdir) / "sync-server.db", identity)
    began, cpu = time.perf_counter(), cpu_seconds()
    for at in range(0, len(items), wire.MAX_PAGE):  # the local baseline: the same entries, same page size
        store.append_many(items[at : at + wire.MAX_PAGE])
    local = {"wall": time.perf_counter() - began, "cpu": cpu_seconds() - cpu}

    async def serve(peer: str, request: bytes) -> bytes:  # PeerSync.serve_sync
        return sync.serve_sync(store, request, store.checkpoint(identity))

    async with open_node(identity, NodeConfig()) as node:
        node.serve(wire.SYNC, serve)  # the daemon's limits: the protocol's one object
        say("ADDR", {"addr": node.listen_addrs()[0], "local": local, "size": store.ledger.size})
        cpu0 = cpu_seconds()
        await read_line()  # the client is done
        say("RESULT", {"cpu": cpu_seconds() - cpu0, "rss_kib": vm_rss_kib()})
    store.close()


async def sync_client(a: argparse.Namespace) -> None:
    identity = node_key(1001)
    store = open_store(Path(a.workdir) / "sync-client.db", identity)
    cursor = sync.SyncCursor(store)
    async with open_node(identity, NodeConfig()) as node:
        peer = await node.connect(a.boot)
        began, cpu, pages = time.perf_counter(), cpu_seconds(), 0
        session = sync.SyncSession(store, cursor)
        while (request := session.next_request()) is not None:  # PeerSync.sync_with
            session.handle_response(await node.ask(peer, wire.SYNC, request))
            pages += 1
        wall, used = time.perf_counter() - began, cpu_seconds() - cpu
        new = sum(applied.new for applied in session.applied)
        say("RESULT", {"wall": wall, "cpu": used, "new": new, "size": store.ledger.size, "requests": pages})
    store.close()


# -- the parent: baselines, processes, figures --------------------------------------------------------------


def spawn(args: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, __file__, *args]
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)


def expect(proc: subprocess.Popen, tag: str) -> object:
    line = proc.stdout.readline()
    if not line.startswith(tag + " "):
        raise SystemExit(f"child said {line[:200]!r}, want {tag}")
    return json.loads(line[len(tag) + 1 :])


def baselines(workdir: Path, batch: int) -> dict[str, float]:
    """Microseconds of CPU per attestation: signature check alone, validate_gossip, append_many (fresh store)."""
    identity = node_key(999)
    items = [make_attestation(identity, n, n) for n in range(4000)]
    signed = [decode_signed(x) for x in items]
    cpu = cpu_seconds()
    for s in signed:
        assert verify_signature(s.verifier, s.signature, DOMAIN + s.body)
    out = {"signature check": (cpu_seconds() - cpu) / len(items) * 1e6}
    messages = wire.batches(RUN, items)  # in batches of up to 256
    small = [wire.batches(RUN, items[at : at + batch])[0] for at in range(0, len(items), batch)]
    cpu = cpu_seconds()
    assert all(validate_gossip(TOPIC, m) for m in small)
    out[f"validate_gossip, batches of {batch}"] = (cpu_seconds() - cpu) / len(items) * 1e6
    cpu = cpu_seconds()
    assert all(validate_gossip(TOPIC, m) for m in messages)
    out["validate_gossip, batches of 256"] = (cpu_seconds() - cpu) / len(items) * 1e6
    with open_store(workdir / "baseline.db", identity) as store:
        cpu = cpu_seconds()
        for at in range(0, len(items), batch):
            store.append_many(items[at : at + batch])
        out[f"append_many, batches of {batch}"] = (cpu_seconds() - cpu) / len(items) * 1e6
    return out


class Sampler(threading.Thread):
    """Load average and machine-wide busy cores, once a second, while the load runs."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.loads: list[float] = []
        self.stop = threading.Event()
        self.first = busy_cores()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.loads.append(os.getloadavg()[0])
        busy, total = busy_cores()
        self.cores = (busy - self.first[0]) / (total - self.first[1]) * os.cpu_count()


def run_gossip(a: argparse.Namespace, workdir: Path) -> list[dict]:
    common = ["--nodes", str(a.nodes), "--rate", str(a.rate), "--seconds", str(a.seconds)]
    common += ["--interval", str(a.interval), "--drain", str(a.drain), "--workdir", str(workdir)]
    common += ["--profile", str(a.profile)]
    procs, boot = [], "-"
    began = time.monotonic()
    try:
        for i in range(a.nodes):
            procs.append(spawn(["--child", "gossip", "--index", str(i), "--boot", boot, *common]))
            addr = expect(procs[-1], "ADDR")
            boot = addr if i == 0 else boot
        for proc in procs:
            expect(proc, "READY")
        print(f"  {a.nodes} nodes meshed in {time.monotonic() - began:.1f} s; idle for {a.idle:.0f} s", flush=True)
        time.sleep(a.idle)
        sampler = Sampler()
        sampler.start()
        start = time.time() + 1.0
        for proc in procs:
            proc.stdin.write(f"GO {start}\n")
            proc.stdin.flush()
        results = [json.loads(Path(expect(proc, "RESULT")).read_text()) for proc in procs]
        for proc in procs:
            proc.stdin.write("STOP\n")
            proc.stdin.flush()
        sampler.stop.set()
        sampler.join()
        for proc in procs:
            proc.wait(timeout=15)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    results[0]["machine"] = {"loads": sampler.loads, "cores": sampler.cores}
    return results


def report_gossip(a: argparse.Namespace, results: list[dict], base: dict[str, float]) -> None:
    n = len(results)
    total = sum(r["per_node"] for r in results)
    sent = {m[0]: (r["index"], m[1], m[2]) for r in results for m in r["published"]}
    mesh_at = {m[0]: m[3] for r in results for m in r["published"]}
    per_pair, due_pair, reach_all = [], [], {}
    for r in results:
        for digest, (at, _fresh) in r["arrivals"].items():
            origin, published, dues = sent.get(digest, (None, None, []))
            if origin is None or origin == r["index"]:
                continue
            per_pair += [at - published] * len(dues)
            due_pair += [at - d for d in dues]
            reach_all[digest] = max(reach_all.get(digest, 0.0), at - published)
    everyone = [reach_all[d] for d in sent for _ in sent[d][2] if d in reach_all]
    spent = max(r["load"]["seconds"] for r in results)
    machine = results[0]["machine"]
    print(f"\n## Gossip: {n} nodes, {a.rate:g} att/s for {a.seconds:g} s, batches every {a.interval:g} s")
    print(f"published {total:,} attestations in {len(sent)} messages ({total / a.seconds:.1f}/s offered)")
    print(f"ledger size per node: {[r['ledger_size'] for r in results]} (want {total} each)")
    lost = sum(total - r["ledger_size"] for r in results)
    print(f"lost (attestations missing from a ledger, summed over nodes): {lost}")
    start = min(m[2][0] for m in sent.values())
    for digest, (origin, published, dues) in sent.items():
        missing = [r["index"] for r in results if r["index"] != origin and digest not in r["arrivals"]]
        reached = [r["index"] for r in results if r["index"] in missing and digest in r["reached_not_stored"]]
        if missing:
            print(f"  (of those, it reached pubsub at nodes {reached} and was dropped there)")
            print(
                f"  message {digest[:12]} of node {origin} ({len(dues)} attestations, published "
                f"{published - start:.1f} s into the load, its mesh then {mesh_at[digest]} peers) "
                f"never reached nodes {missing}"
            )
    sizes = sorted(mesh_at.values())
    print(f"publisher's mesh size at publish: min {sizes[0]}, median {sizes[len(sizes) // 2]}, max {sizes[-1]}")
    print(f"load average during the load: {min(machine['loads']):.2f}..{max(machine['loads']):.2f}")
    print(f"machine busy: {machine['cores']:.2f} of {os.cpu_count()} cores (all processes, ours and others)")
    print("latency, publish -> stored at a node (each attestation x each other node):")
    print(f"  p50 {quantile(per_pair, 0.5) * 1000:.0f} ms, p99 {quantile(per_pair, 0.99) * 1000:.0f} ms")
    print(f"  max {max(per_pair) * 1000:.0f} ms over {len(per_pair):,} arrivals")
    print(
        f"latency, publish -> stored at every node: p50 {quantile(everyone, 0.5) * 1000:.0f} ms, "
        f"p99 {quantile(everyone, 0.99) * 1000:.0f} ms"
    )
    print(
        f"latency, due (signed, waiting for its batch) -> stored at a node: p50 {quantile(due_pair, 0.5) * 1000:.0f}"
        f" ms, p99 {quantile(due_pair, 0.99) * 1000:.0f} ms"
    )
    print("\n| node | CPU idle ms/s | CPU under load s | CPU us/att | net of idle us/att | copies/msg | "
          "VmRSS idle MiB | VmRSS peak MiB | ru_maxrss MiB |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    per_att = []
    for r in results:
        load, idle, c = r["load"], r["idle"], r["counters"]
        us = load["cpu"] / total * 1e6
        net = (load["cpu"] - idle["cpu_per_s"] * load["seconds"]) / total * 1e6
        per_att.append((us, net))
        print(
            f"| {r['index']} | {idle['cpu_per_s'] * 1000:.0f} | {load['cpu']:.2f} | {us:.0f} | {net:.0f} | "
            f"{c['copies'] / len(sent):.2f} | {idle['rss_kib'] / 1024:.1f} | {load['rss_peak_kib'] / 1024:.1f} | "
            f"{load['maxrss_kib'] / 1024:.1f} |"
        )
    mean_us = sum(x for x, _ in per_att) / n
    mean_net = sum(x for _, x in per_att) / n
    print(f"mean CPU per attestation per node: {mean_us:.0f} us ({mean_net:.0f} us net of idle);")
    print(f"  per gossip message per node: {mean_us * total / len(sent) / 1000:.1f} ms")
    print(f"  all {n} nodes: {mean_us * n * total / spent / 1e6:.2f} cores at {total / spent:.0f} att/s")
    for name, us in base.items():
        print(f"  baseline {name}: {us:.1f} us/att (node CPU per attestation = {mean_us / us:.1f}x)")
    print(f"validations per message: {[round(r['counters']['validations'] / len(sent), 2) for r in results]}")
    stuck = {r["index"]: r["queued"] for r in results if r["queued"]}
    print(f"RPCs left in send queues 1 s after the load, by node and peer: {stuck or 'none'}")
    totals = {k: sum(r["stats"][k] for r in results) for k in results[0]["stats"]}
    print(f"gossip stats, all nodes: {totals}")
    for r in results:
        if "profile" in r:
            print(f"\ncProfile of node {r['index']} under the load (top 25 by own time):\n{r['profile']}")
            whole = sum(r["profile_groups"].values())
            print("| where | own time s | share |\n|---|---:|---:|")
            for label, seconds in r["profile_groups"].items():
                print(f"| {label} | {seconds:.2f} | {seconds / whole:.0%} |")


def run_sync(a: argparse.Namespace, workdir: Path) -> None:
    server = spawn(["--child", "sync-server", "--sync-count", str(a.sync_count), "--workdir", str(workdir)])
    client = None
    try:
        hello = expect(server, "ADDR")
        load0 = os.getloadavg()[0]
        client = spawn(["--child", "sync-client", "--boot", hello["addr"], "--workdir", str(workdir)])
        result = expect(client, "RESULT")
        server.stdin.write("DONE\n")
        server.stdin.flush()
        served = expect(server, "RESULT")
    finally:
        for proc in (server, client):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.wait()
    local = hello["local"]
    print(f"\n## Sync: {hello['size']:,} attestations, one full node -> one empty node")
    print(f"stored {result['new']:,} new (ledger size {result['size']:,}) in {result['requests']} requests")
    print(f"time to catch up: {result['wall']:.2f} s wall ({result['size'] / result['wall']:,.0f}/s); "
          f"client CPU {result['cpu']:.2f} s, server CPU {served['cpu']:.2f} s")  # fmt: skip
    print(f"baseline, append_many of the same entries in pages of 256 locally: {local['wall']:.2f} s wall, "
          f"{local['cpu']:.2f} s CPU (sync / local = {result['wall'] / local['wall']:.1f}x wall)")  # fmt: skip
    print(f"load average: {load0:.2f} before, {os.getloadavg()[0]:.2f} after")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--rate", type=float, default=200.0, help="attestations per second, all nodes together")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--interval", type=float, default=1.0, help="seconds between one node's gossip batches")
    p.add_argument("--drain", type=float, default=30.0, help="seconds to wait for stragglers after publishing")
    p.add_argument("--idle", type=float, default=5.0, help="idle seconds measured before the load")
    p.add_argument("--sync-count", type=int, default=10_000)
    p.add_argument("--quick", action="store_true", help="15 s of gossip")
    p.add_argument("--only", choices=("gossip", "sync"), default=None)
    p.add_argument("--profile", type=int, default=-1, help="cProfile this node index under the load")
    p.add_argument("--child", choices=("gossip", "sync-server", "sync-client"), help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--boot", default="-", help=argparse.SUPPRESS)
    p.add_argument("--workdir", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        trio.run({"gossip": gossip_node, "sync-server": sync_server, "sync-client": sync_client}[a.child], a)
        return
    if a.quick:
        a.seconds = 15.0
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average {os.getloadavg()}; {time.strftime('%F %T %Z')}")
    with tempfile.TemporaryDirectory(prefix="network-bench-") as tmp:
        workdir = Path(tmp)
        batch = max(1, round(a.rate / a.nodes * a.interval))
        base = baselines(workdir, batch)
        if a.only in (None, "gossip"):
            report_gossip(a, run_gossip(a, workdir), base)
        if a.only in (None, "sync"):
            run_sync(a, workdir)
    print(f"\nload average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
