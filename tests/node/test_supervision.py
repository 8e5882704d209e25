"""Supervised loops and peer accounting (issue 12): a failing loop restarts with back-off, a sync server
that answers with an oversize page is banned once (not asked again every few seconds), and one that
declines with a refusal is backed off from, never banned."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import trio
import trio.testing
from hostile_peer import hostile_config, hostile_key
from node_helpers import in_mesh, wait_until

from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.audit.replay import open_run
from p2paudit.identity import identity_from_seed
from p2paudit.node import wire
from p2paudit.node.assign.auditor import AuditPolicy
from p2paudit.node.daemon.daemon import DaemonConfig
from p2paudit.node.daemon.run import run_daemon, serve
from p2paudit.node.daemon.sources import LocalSource
from p2paudit.node.net import open_node
from p2paudit.node.net._containment import CONTAINED, SUPERVISE_MAX_DELAY, supervise
from p2paudit.node.protocols import reconcile, sync
from p2paudit.run.publisher import TrainPlan, publish_run

PUBLISHER = identity_from_seed(b"\x68" * 32)


def test_a_failing_loop_is_restarted_with_doubling_back_off_and_reported():
    reports: list[tuple[str, str, str]] = []
    starts: list[float] = []

    async def flaky() -> None:
        starts.append(trio.current_time())
        if len(starts) <= 8:
            raise RuntimeError(f"planted failure {len(starts)}")
        await trio.sleep_forever()

    async def main() -> None:
        with trio.move_on_after(1000):
            await supervise(flaky, lambda *r: reports.append(r), name="flaky")

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    assert gaps == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, SUPERVISE_MAX_DELAY, SUPERVISE_MAX_DELAY]
    assert len(starts) == 9  # the ninth run stayed up
    assert [r[0] for r in reports] == [CONTAINED] * 8
    assert "planted failure 8" in reports[-1][2] and "loop flaky" in reports[-1][2]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("supervision") / "run"
    # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
    publish_run(TrainPlan(run, "tiny", steps=2, ckpt_every=1, backend="reference", arithmetic=1), PUBLISHER)
    return run


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("answer", ["oversize", "refusal"])
def test_bad_sync_server_is_banned_once_and_a_declining_one_backed_off(run_dir, tmp_path, answer):
    asked: list[float] = []

    async def serve(peer: str, request: bytes) -> bytes:
        asked.append(trio.current_time())
        if answer == "oversize":  # over MAX_PAGE_BYTES: refused by the frame reader before it is read
            return b"\x00" * (2_400_000)
        return wire.sync_refusal("this peer does not serve sync")

    events = []
    config = DaemonConfig(
        runs=(LocalSource(open_run(run_dir)),),
        ledger_path=tmp_path / "ledger.db",
        status_path=tmp_path / "status.json",
        backend="reference",
        policy=AuditPolicy(redundancy=1),
        duration=20.0,
    )

    async def main() -> None:
        async with open_node(hostile_key("sync " + answer), hostile_config()) as liar:
            liar.set_handler(
                wire.SYNC_PROTOCOL,
                serve,
                max_request=64,
                max_response=3_000_000,
                timeout=10.0,
                refuse=wire.sync_refusal,
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_daemon, identity_from_seed(b"\x69" * 32), config, events.append)
                await wait_until(lambda: (tmp_path / "status.json").exists(), "the daemon's status", 60)
                addr = json.loads((tmp_path / "status.json").read_text())["listen"][0]
                await liar.connect(addr)
                await wait_until(lambda: len(asked) >= 1, "a sync request", 30)
                await trio.sleep(12.0)  # four sync intervals
                seen.update(peer=liar.peer_id, status=json.loads((tmp_path / "status.json").read_text()))
                nursery.cancel_scope.cancel()

    seen: dict = {}
    trio.run(main)
    texts = [e.text for e in events]
    bans = [t for t in texts if t.startswith("banned")]
    status, written = seen["status"], seen["status"]["written_at"]
    (sync,) = [s for s in status["sync"] if s["peer"] == seen["peer"]]
    assert sync["state"] == "backing-off" and sync["last_ok"] is None and sync["next_try"] >= written - 1
    if answer == "oversize":
        assert len(asked) == 1, f"asked {len(asked)} times"
        assert any("bad sync page" in t and "2400000" in t for t in texts), texts[-10:]
        assert len(bans) == 1
        (ban,) = status["bans"]
        assert ban["peer"] == seen["peer"] and "bad sync page" in ban["reason"] and "2400000" in ban["reason"]
        assert written + 500 < ban["until"] <= written + 600  # the 600 s ban, begun 12 s ago
        assert "2400000" in sync["error"] and sync["next_try"] == pytest.approx(ban["until"], abs=1)
    else:
        assert bans == [] and status["bans"] == []
        assert 2 <= len(asked) <= 3, f"asked {len(asked)} times in 12 s (back-off 3, 6, 12 s)"
        assert any("next try in" in t for t in texts)
        assert "does not serve sync" in sync["error"] and sync["next_try"] <= written + 13


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_dispute_is_announced_once_however_many_attestations_join_it(run_dir, tmp_path):
    """40 keys attest one step, alternating match and mismatch: one dispute, so one evidence message
    (before, one per conflicting attestation: a flooder set the rate of our evidence gossip)."""
    from hostile_peer import batch, envelope

    run_id = open_run(run_dir).manifest.run_id
    evidence: list[bytes] = []
    events = []
    config = DaemonConfig(
        runs=(LocalSource(open_run(run_dir)),),
        ledger_path=tmp_path / "ledger.db",
        status_path=tmp_path / "status.json",
        backend="reference",
        policy=AuditPolicy(redundancy=1),
        duration=60.0,
    )
    keys = [hostile_key(f"crowd {i}") for i in range(40)]
    messages = [
        batch(run_id, [envelope(k, run_id, 1, "match" if i % 2 else "mismatch", time_ms=5)]) for i, k in enumerate(keys)
    ]

    async def main() -> None:
        async with open_node(hostile_key("crowd sender"), hostile_config()) as sender:
            await sender.subscribe(wire.EVIDENCE_TOPIC, lambda origin, data: evidence.append(data))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_daemon, identity_from_seed(b"\x6a" * 32), config, events.append)
                await wait_until(lambda: (tmp_path / "status.json").exists(), "the daemon's status", 60)
                import json

                addr = json.loads((tmp_path / "status.json").read_text())["listen"][0]
                topic = wire.run_topic(run_id)
                await sender.subscribe(topic, lambda origin, data: None)
                target = await sender.connect(addr)
                # Grafted on both topics (once: known on them, then a fixed 2 s of heartbeats).
                both = lambda: in_mesh(sender, topic, target) and in_mesh(sender, wire.EVIDENCE_TOPIC, target)  # noqa: E731
                await wait_until(both, "the daemon in our mesh on the run and evidence topics", 30)
                for message in messages:
                    await sender.publish(topic, message)
                    await trio.sleep(0.05)
                received = lambda: json.loads((tmp_path / "status.json").read_text())["received"]  # noqa: E731
                await wait_until(lambda: received() >= len(messages), "every attestation stored", 60)
                await trio.sleep(3.0)
                nursery.cancel_scope.cancel()

    trio.run(main)
    disputes = [e.text for e in events if e.kind == "conflict" and "dispute at step 1" in e.text]
    assert len(disputes) == 1, disputes
    assert len(evidence) == 1
    assert wire.decode_evidence(evidence[0]).kind == "dispute"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_peer_that_serves_no_p2paudit_protocol_does_not_hold_the_daemon_back(run_dir, tmp_path):
    """--until-covered finishes beside a connected peer that serves neither sync nor settled (a light client,
    another implementation): it is backed off from, not waited for."""
    config = DaemonConfig(
        runs=(LocalSource(open_run(run_dir)),),
        ledger_path=tmp_path / "ledger.db",
        status_path=tmp_path / "status.json",
        backend="reference",
        policy=AuditPolicy(redundancy=1),
        stop_when_covered=True,
        linger=1.0,
    )
    events = []
    finished: list[float] = []

    async def main() -> None:
        done = trio.Event()  # the daemon finished
        async with open_node(hostile_key("light client"), hostile_config()) as client:
            async with trio.open_nursery() as nursery:

                async def daemon() -> None:
                    await run_daemon(identity_from_seed(b"\x6b" * 32), config, events.append)
                    finished.append(trio.current_time())
                    done.set()

                nursery.start_soon(daemon)
                await wait_until(lambda: (tmp_path / "status.json").exists(), "the daemon's status", 60)
                import json

                await client.connect(json.loads((tmp_path / "status.json").read_text())["listen"][0])
                with trio.move_on_after(60):
                    await done.wait()
                nursery.cancel_scope.cancel()

    trio.run(main)
    assert finished, "the daemon never finished: it waited for a peer that serves no sync"
    assert any("every step is covered" in e.text for e in events)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_peer_in_step_is_asked_for_its_checkpoint_once_a_minute_not_at_every_sync(run_dir, tmp_path):
    """A quiet sync is one reconciliation probe; the signed checkpoint (the bigger answer) waits a minute."""
    peer_key = hostile_key("quiet peer")
    store = AttestationStore.open(tmp_path / "peer.db", origin_for(peer_key.public_key))
    reconcile.ensure_index(store)
    asked = {"reconcile": 0, "status": 0}

    async def serve_reconcile(peer: str, request: bytes) -> bytes:
        asked["reconcile"] += 1
        return reconcile.serve(store, request)

    async def serve_sync(peer: str, request: bytes) -> bytes:
        asked["status"] += 1
        return sync.serve_sync(store, request, store.checkpoint(peer_key))

    config = DaemonConfig(
        runs=(LocalSource(open_run(run_dir)),),
        ledger_path=tmp_path / "ledger.db",
        status_path=tmp_path / "status.json",
        backend="reference",
        policy=AuditPolicy(redundancy=1),
        duration=30.0,
    )

    async def main() -> None:
        async with open_node(peer_key, hostile_config()) as peer:
            serve(peer, reconcile.RECONCILE_PROTOCOL, serve_reconcile)
            serve(peer, wire.SYNC_PROTOCOL, serve_sync)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run_daemon, identity_from_seed(b"\x6c" * 32), config, lambda event: None)
                await wait_until(lambda: (tmp_path / "status.json").exists(), "the daemon's status", 60)
                await peer.connect(json.loads((tmp_path / "status.json").read_text())["listen"][0])
                await wait_until(lambda: asked["reconcile"] >= 4, "four syncs", 30)
                nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        store.close()
    assert asked["status"] == 1, asked


def test_only_provably_bad_input_is_queued_for_a_ban(tmp_path, run_dir):
    """rejected and malformed ban; our validator's bug, a contained error and a rate limit never do."""
    from p2paudit.node.daemon.daemon import Daemon
    from p2paudit.node.net._config import NodeEvent

    config = DaemonConfig(
        runs=(LocalSource(open_run(run_dir)),), ledger_path=tmp_path / "l.db", status_path=tmp_path / "s.json"
    )
    no_store = SimpleNamespace(call=None)  # nothing here reaches the store
    # The node a daemon is made with, running: the peers named in the events are neither kept nor connected.
    node = SimpleNamespace(is_bootstrap=lambda peer: False, is_banned=lambda peer: False, report=lambda *args: None)
    daemon = Daemon(
        identity_from_seed(b"\x6c" * 32), config, db=no_store, ledgered=None, emit=lambda event: None, node=node
    )
    for kind in ("validator_errors", "contained", "rate_limited", "refused", "rejected", "malformed"):
        daemon.on_node_event(NodeEvent(kind, f"peer-{kind}", "detail"))
    queued = []
    while True:
        try:
            queued.append(daemon._ban_receive.receive_nowait()[0])
        except trio.WouldBlock:
            break
    assert queued == ["peer-rejected", "peer-malformed"]
