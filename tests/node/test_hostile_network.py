"""Hostile peers against honest daemons running as real processes on 127.0.0.1 (issue 8, "Bad peers").

The honest nodes are `p2paudit daemon` processes started by p2paudit.node.localnet on a tiny published
run; each hostile peer runs in this process through the libp2p adapter with its own key. Everything is
judged by counts once the honest network has stopped by itself: which bytes each ledger holds, which
peers each daemon's log says it banned, refused or rate-limited.
"""

from __future__ import annotations

import math
import re
import socket
from pathlib import Path

import pytest
import trio
from click.testing import CliRunner
from hostile_peer import (
    HostileLedger,
    SyncLiar,
    beyond_run,
    connect_on_topic,
    envelope,
    forged,
    hostile_config,
    hostile_key,
    malformed,
    non_canonical,
    oversized,
    refuse,
    wait_until,
    wrong_run,
)

from p2paudit.attest.queries import coverage, equivocations
from p2paudit.attest.record import decode_signed
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.audit.replay import open_run
from p2paudit.cli import cli
from p2paudit.identity import ensure_node_identity, identity_from_seed, peer_id_of
from p2paudit.node import wire
from p2paudit.node.daemon.run import serve
from p2paudit.node.localnet import LocalNet, NodeSpec, start_network, start_node, stop, wait_all, wait_listening
from p2paudit.node.net import NodeConfig, open_node
from p2paudit.run.publisher import TrainPlan, publish_run

PUBLISHER = identity_from_seed(b"\x66" * 32)
STEPS = 4
FLOOD = 2000  # well over the adapter's per-origin burst (NodeConfig.origin_burst = 1000)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("hostile") / "run"
    # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
    publish_run(TrainPlan(run, "tiny", steps=STEPS, ckpt_every=2, backend="reference", arithmetic=1), PUBLISHER)
    return run


def _peer(home: Path) -> str:
    return peer_id_of(ensure_node_identity(home)[0].public_key)


def _ledger(home: Path) -> tuple[set[bytes], AttestationStore]:
    store = AttestationStore.open_readonly(home / "ledger.db")
    report = store.ledger.verify()
    assert report.ok, f"the ledger in {home} does not verify: {report.problems[:1]}"
    return {bytes(e) for e in store.ledger.entries()}, store


def _log(net: LocalNet, name: str) -> str:
    return net.logs[name].read_text(errors="replace")


def _lines(log: str, *words: str) -> list[str]:
    return [line for line in log.splitlines() if all(w in line for w in words)]


def _flood_lines(log: str, origin: str) -> list[str]:
    """node-0's verdicts on the liar's batches: rate-limited (by origin), or passed and refused by the store."""
    return _lines(log, "rate_limited", f"origin {origin} ") + _lines(
        log, "refused", f"batch from {origin[:16]}", "steps"
    )


def _covered_twice(store: AttestationStore, run_id: bytes) -> bool:
    per_step = {item.step: item.checked for item in coverage(store, run_id).per_step}
    return all(per_step.get(step, 0) >= 2 for step in range(STEPS))


# -- 1. bad data of every kind ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_hostile_peers_bad_data_is_neither_stored_nor_forwarded_and_they_are_banned(run_dir, tmp_path):
    run_id = open_run(run_dir).manifest.run_id
    topic = wire.run_topic(run_id)
    specs = tuple(NodeSpec(f"node-{i}", tmp_path / f"node-{i}") for i in range(2))
    node1 = _peer(specs[1].home)
    kinds = {"forged": forged, "non-canonical": non_canonical, "malformed": malformed, "oversized": oversized}
    kinds["wrong-run"] = wrong_run
    keys = {kind: hostile_key(kind) for kind in [*kinds, "liar"]}
    liar = keys["liar"]
    gossip = {kind: make(keys[kind], run_id) for kind, make in kinds.items()}
    flood = beyond_run(liar, run_id, STEPS, 1 + FLOOD)  # the first alone, then the flood
    # The liar's own ledger: three real attestations; its pages come with the first two swapped.
    liar_ledger = HostileLedger.make(
        tmp_path / "liar.db", liar, run_id, STEPS, [envelope(liar, run_id, s, time_ms=7) for s in range(3)]
    )
    empty = HostileLedger.make(tmp_path / "empty.db", liar, run_id, STEPS, [])
    hostile_bytes = {item for _, item in gossip.values()} | {item for _, item in flood}
    hostile_bytes |= {bytes(e) for e in liar_ledger.store.ledger.entries()}
    peers = {kind: peer_id_of(k.public_key) for kind, k in keys.items()}
    assert len({p[:16] for p in peers.values()}) == len(peers)  # the daemon's log shows 16 characters
    # Until its flood is out the liar answers sync with its empty ledger (nothing to ban); then it lies.
    liar_sync = SyncLiar([empty, liar_ledger], swap=True, stage=0)
    lost: dict[str, bool] = {}

    async def one_kind(kind: str, address: str) -> None:
        async with open_node(keys[kind], hostile_config()) as node:
            await refuse(node, [node1])  # node-1 only ever hears of it through node-0
            target = await connect_on_topic(node, address, topic)
            await node.publish(topic, gossip[kind][0])
            await wait_until(lambda: target not in node.connected_peers(), f"node-0 to drop the {kind} peer", 30)
            lost[kind] = True

    async def the_liar(address: str) -> None:
        async with open_node(liar, hostile_config()) as node:
            serve(node, wire.SYNC_PROTOCOL, liar_sync.serve)  # under the daemon's own limits
            await refuse(node, [node1])
            target = await connect_on_topic(node, address, topic)
            for message, _ in flood:  # one batch past the run's end, then a flood of them
                await node.publish(topic, message)
            # Lie only once node-0 has judged every one (the ban would cut the flood short); after 60 s, lie anyway.
            judged = lambda: len(_flood_lines(_log(net, "node-0"), peers["liar"])) >= len(flood)  # noqa: E731
            with trio.move_on_after(60):
                await wait_until(judged, "node-0 to judge the flood", math.inf, step=0.5)
            liar_sync.stage = 1
            await wait_until(lambda: target not in node.connected_peers(), "node-0 to drop the sync liar", 40)
            lost["liar"] = True

    async def hostile(address: str) -> None:
        with trio.fail_after(90):
            async with trio.open_nursery() as nursery:
                for kind in kinds:
                    nursery.start_soon(one_kind, kind, address)
                nursery.start_soon(the_liar, address)

    net = start_network(specs, run_dir, backend="reference", redundancy=2)
    try:
        trio.run(hostile, wait_listening(net, "node-0"))
        codes = wait_all(net, 120)
    finally:
        stop(net)
        liar_ledger.store.close()
        empty.store.close()
    assert codes == {"node-0": 0, "node-1": 0}, codes  # both finished covered, by themselves
    assert lost == dict.fromkeys(peers, True)

    held, stores = {}, {}
    for spec in specs:
        held[spec.name], stores[spec.name] = _ledger(spec.home)
    try:
        union = set().union(*held.values())
        assert held["node-0"] == held["node-1"] == union
        hostile_keys = {k.public_key for k in keys.values()}
        by_hostile = [e for e in union if decode_signed(e).attestation.verifier in hostile_keys]
        assert (len(union & hostile_bytes), len(by_hostile)) == (0, 0)
        assert len(union) == 2 * (1 + STEPS)  # init and every step, by both honest keys
        assert all(_covered_twice(store, run_id) for store in stores.values())
    finally:
        for store in stores.values():
            store.close()

    log0, log1 = _log(net, "node-0"), _log(net, "node-1")
    for kind in kinds:  # each kind of bad gossip: rejected by the validator, and the sender banned for it
        assert _lines(log0, "rejected", peers[kind][:16]), kind
        assert len(_lines(log0, "banned", peers[kind][:16], "bad gossip")) == 1, kind
    assert len(_lines(log0, "banned", peers["liar"][:16], "bad sync page")) == 1
    assert liar_sync.pages >= 1
    # The flood: the per-origin bucket cut it; what passed (valid bytes, steps past the run) was refused by
    # the store, one line each; together no more than the batches sent.
    limited_lines = _lines(log0, "rate_limited", f"origin {peers['liar']} ")
    refused_lines = _lines(log0, "refused", f"batch from {peers['liar'][:16]}", "steps")
    limited, refused = len(limited_lines), len(refused_lines)
    assert refused >= 1
    assert limited + refused == len(flood)  # each judged once: none lost, none judged twice
    # The bucket (burst 1,000, 100 a second) must cut a flood judged faster than it refills; node-0 holds a
    # peer's stream while 32 of its messages are in processing, so on a loaded machine the flood may be
    # judged slower than that, and then nothing needs cutting.
    seconds = [float(line.split("s", 1)[0]) for line in limited_lines + refused_lines]
    took = max(seconds) - min(seconds)
    burst, rate = NodeConfig().origin_burst, NodeConfig().origin_rate
    if took < (len(flood) - burst) / rate:
        assert limited >= 1, f"a flood judged in {took:.1f} s was not rate-limited"
    # Nothing node-0 rejected reached node-1: node-1 never rejected a message and never banned anyone.
    assert (_lines(log1, "rejected"), _lines(log1, "banned")) == ([], [])
    assert not any(_lines(log1, "connected", p[:16]) for p in peers.values())


# -- 2. equivocation and split view -------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_an_equivocating_peer_leaves_its_evidence_with_every_honest_node(run_dir, tmp_path):
    run_id = open_run(run_dir).manifest.run_id
    topic = wire.run_topic(run_id)
    specs = tuple(NodeSpec(f"node-{i}", tmp_path / f"node-{i}") for i in range(2))
    node1 = _peer(specs[1].home)
    cheat = hostile_key("equivocator")
    cheat_peer = peer_id_of(cheat.public_key)
    said_match = envelope(cheat, run_id, 1, "match", time_ms=5)
    said_mismatch = envelope(cheat, run_id, 1, "mismatch", time_ms=6)
    # Two ledgers of one size under the one key: two signed tree heads of size 1 with different roots.
    first = HostileLedger.make(tmp_path / "first.db", cheat, run_id, STEPS, [said_match])
    second = HostileLedger.make(tmp_path / "second.db", cheat, run_id, STEPS, [said_mismatch])
    liar_sync = SyncLiar([first, second])
    heads = {first.store.ledger.root(), second.store.ledger.root()}
    assert len(heads) == 2 and first.store.ledger.size == second.store.ledger.size == 1
    heard: list[wire.Evidence] = []

    async def on_evidence(origin: str, data: bytes) -> None:
        heard.append(wire.decode_evidence(data))

    def heard_kind(kind: str) -> bool:
        return any(e.kind == kind for e in heard)

    async def equivocate(address: str) -> None:
        with trio.fail_after(90):
            async with open_node(cheat, hostile_config()) as node:
                serve(node, wire.SYNC_PROTOCOL, liar_sync.serve)  # under the daemon's own limits
                await refuse(node, [node1])  # node-1 learns all of it from node-0
                await node.subscribe(wire.EVIDENCE_TOPIC, on_evidence)
                await connect_on_topic(node, address, topic)
                await node.publish(topic, wire.encode_batch(wire.GossipBatch(run_id, (said_match, said_mismatch))))
                await wait_until(lambda: heard_kind("equivocation"), "equivocation evidence", 60)
                await wait_until(lambda: heard_kind("split_view"), "split-view evidence", 60)

    net = start_network(specs, run_dir, backend="reference", redundancy=2)
    try:
        trio.run(equivocate, wait_listening(net, "node-0"))
        codes = wait_all(net, 120)
    finally:
        stop(net)
        first.store.close()
        second.store.close()
    assert codes == {"node-0": 0, "node-1": 0}, codes
    assert liar_sync.statuses.get(_peer(specs[0].home), 0) >= 2 and node1 not in liar_sync.statuses

    # What node-0 announced on the evidence topic: exactly the two signed results, and the two tree heads.
    equivocation = next(e for e in heard if e.kind == "equivocation")
    assert {equivocation.first, equivocation.second} == {said_match, said_mismatch}
    split = next(e for e in heard if e.kind == "split_view")
    assert {split.first, split.second} == {first.note, second.note}

    for spec in specs:
        held, store = _ledger(spec.home)
        try:
            assert {said_match, said_mismatch} <= held, spec.name
            found = equivocations(store)
            assert [(k.verifier, k.step) for k in found.keys] == [(cheat.public_key, 1)], spec.name
            assert len(found.keys[0].evidence) == 2
            views = store.ledger.split_views()
            assert [(v.origin, v.size, set(v.roots)) for v in views] == [(origin_for(cheat.public_key), 1, heads)]
        finally:
            store.close()
        shown = CliRunner().invoke(cli, ["ledger", "equivocations"], env={"P2PAUDIT_HOME": str(spec.home)})
        assert shown.exit_code == 0, shown.output
        assert "1 key equivocations, 1 tree-head split views" in shown.output, shown.output
        assert f"key {cheat.public_key.hex()[:16]}... run {run_id.hex()[:16]}... step 1" in shown.output
    # node-1 never met the cheat: the split view reached it only as evidence gossiped by node-0.
    log1 = _log(net, "node-1")
    assert not _lines(log1, "connected", cheat_peer[:16])
    assert _lines(log1, "evidence", "split_view from", _peer(specs[0].home)[:16])


# -- 3. partition and heal ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_two_partitions_heal_and_converge_with_consistent_checkpoints(run_dir, tmp_path):
    names = ["a-0", "a-1", "b-0", "b-1"]
    specs = {n: NodeSpec(n, tmp_path / n) for n in names}
    ports = {n: _free_port() for n in names}
    addr = {n: f"/ip4/127.0.0.1/tcp/{ports[n]}/p2p/{_peer(specs[n].home)}" for n in names}
    net = LocalNet(tuple(specs.values()))

    def start(name: str, peer: str | None, redundancy: int) -> None:
        # Stop once covered, or after 90 s at the latest (localnet drops --until-covered when given --duration).
        extra = ("--listen", f"/ip4/127.0.0.1/tcp/{ports[name]}", "--duration", "90", "--until-covered")
        start_node(net, specs[name], run_dir, peer, "reference", redundancy, extra)

    try:
        # Partitioned: each group's second node knows only its first; each group covers the run alone.
        for group in "ab":
            start(f"{group}-0", None, 2)
            start(f"{group}-1", addr[f"{group}-0"], 2)
        assert wait_all(net, 60) == dict.fromkeys(names, 0)
        before = {n: _ledger(specs[n].home) for n in names}
        for _, store in before.values():
            store.close()
        groups = {g: before[f"{g}-0"][0] for g in "ab"}
        assert before["a-1"][0] == groups["a"] and before["b-1"][0] == groups["b"]
        assert len(groups["a"] & groups["b"]) == 0 and len(groups["a"]) == len(groups["b"]) == 2 * (1 + STEPS)
        # Healed: node-0 of each group is told the other's address. Redundancy 4 makes "covered" mean
        # holding all four keys' checks, so no node stops before it has heard from the other group.
        for group, other in (("a", "b"), ("b", "a")):
            start(f"{group}-0", addr[f"{other}-0"], 4)
            start(f"{group}-1", addr[f"{group}-0"], 4)
        assert wait_all(net, 60) == dict.fromkeys(names, 0)
    finally:
        stop(net)

    after = {n: _ledger(specs[n].home) for n in names}
    try:
        union = groups["a"] | groups["b"]
        assert all(held == union for held, _ in after.values()), {n: len(h) for n, (h, _) in after.items()}
        roots = {n: store.ledger for n, (_, store) in after.items()}
        origins = {ledger.origin: n for n, ledger in roots.items()}
        checked = 0
        for name, (_, store) in after.items():
            assert store.ledger.split_views() == [], name
            rows = store.conn.execute("SELECT origin, size, root FROM checkpoints WHERE kind = 'peer'").fetchall()
            for origin, size, root in rows:  # every peer head seen here is that peer's real tree at that size
                assert roots[origins[origin]].root(size) == bytes(root), (name, origin, size)
                checked += 1
        assert checked >= len(names)  # each node kept peer checkpoints (sync handshakes, witnessing)
    finally:
        for _, store in after.values():
            store.close()
    for name in names:
        assert not re.search(r"banned|split view", _log(net, name)), name
