"""The daemon's and the node's times are trio's clock (issue 20 item 4): a peer's sync back-off, the spill-over
grace and a ban are waited out on `trio.testing.MockClock`, exactly, in no real time."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import trio
import trio.testing
from test_libp2p_adapter import config, ident

from p2paudit.identity import identity_from_seed, peer_id_of
from p2paudit.node.daemon.daemon import SPILL_GRACE, DaemonConfig
from p2paudit.node.daemon.peer_sync import RETRY_MAX, RETRY_MIN
from p2paudit.node.net import open_node
from p2paudit.node.net._requests import RequestFailed

PEER = peer_id_of(identity_from_seed(b"\x71" * 32).public_key)


def on_mock_clock(body) -> None:
    trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))


def a_daemon(tmp_path, reports: list[str], connected: tuple[str, ...] = ()):
    from p2paudit.node.daemon.daemon import Daemon

    config = DaemonConfig((), tmp_path / "ledger.db", tmp_path / "status.json")
    no_store = SimpleNamespace(call=None)  # nothing here reaches the store
    # The node a daemon is made with, running: these peers connected, none banned or bootstrap.
    node = SimpleNamespace(
        connected_peers=lambda: list(connected),
        bans=lambda: [],
        is_bootstrap=lambda peer: False,
        is_banned=lambda peer: False,
        report=lambda kind, peer, detail: None,
    )
    return Daemon(identity_from_seed(b"\x72" * 32), config, no_store, None, lambda e: reports.append(e.text), node)


def test_a_peer_whose_sync_fails_is_asked_again_after_3_s_doubling_to_300_s(tmp_path) -> None:
    reports: list[str] = []
    daemon = a_daemon(tmp_path, reports, connected=(PEER,))

    async def body() -> None:
        waited = []
        for _ in range(9):
            assert daemon.peers.due("sync", PEER)
            failed_at = trio.current_time()
            daemon.peers.sync_tried(PEER, "unreachable")
            daemon.peers.unreachable("sync", PEER, RequestFailed("unreachable"))
            delay = float(reports[-1].rsplit("next try in ", 1)[1].rstrip("s"))
            [state] = daemon.peers.sync_states()
            assert state["state"] == "backing-off"
            assert state["next_try"] - time.time() == pytest.approx(delay, abs=0.5)  # unix seconds
            await trio.sleep_until(failed_at + delay - 0.001)
            assert not daemon.peers.due("sync", PEER)
            await trio.sleep_until(failed_at + delay)
            waited.append(delay)
        assert daemon.peers.due("sync", PEER)
        assert waited == [RETRY_MIN * 2**i for i in range(7)] + [RETRY_MAX, RETRY_MAX]  # 3 s ... 192 s, 300 s
        daemon.peers.retry.succeeded(("sync", PEER))
        daemon.peers.unreachable("sync", PEER, RequestFailed("unreachable"))
        assert reports[-1].endswith(f"next try in {RETRY_MIN:.0f}s")  # a sync that worked starts it afresh

    on_mock_clock(body)


def test_spill_over_waits_for_spill_grace_after_the_last_change(tmp_path) -> None:
    daemon = a_daemon(tmp_path, [])

    async def body() -> None:
        assert not daemon.audit.may_spill()  # not started: nothing has been quiet yet
        daemon.progress.changed()  # run_daemon starts the clock
        changed_at = trio.current_time()
        await trio.sleep_until(changed_at + SPILL_GRACE - 0.001)
        assert not daemon.audit.may_spill()
        await trio.sleep_until(changed_at + SPILL_GRACE)
        assert daemon.audit.may_spill()
        daemon.progress.changed()  # an audit, a received attestation
        assert not daemon.audit.may_spill()

    on_mock_clock(body)


@pytest.mark.timeout(60)
def test_a_ban_lasts_its_time_on_trios_clock_and_its_end_is_reported() -> None:
    async def body() -> None:
        events = []
        async with open_node(ident(1), config(), events.append) as node:
            liar = peer_id_of(ident(2).public_key)
            banned_at = trio.current_time()
            await node.penalize(liar, "planted bad data")  # the default ban: 600 s
            [ban] = node.bans()
            assert (ban["peer"], ban["reason"]) == (liar, "planted bad data")
            assert ban["until"] - time.time() == pytest.approx(node.config.ban_seconds, abs=1.0)
            await trio.sleep_until(banned_at + node.config.ban_seconds - 0.001)
            assert node.is_banned(liar) and [e.kind for e in events if e.peer == liar] == ["banned"]
            await trio.sleep_until(banned_at + node.config.ban_seconds)
            assert not node.is_banned(liar) and node.bans() == []
            await trio.sleep(0.25)  # the node's maintenance tick lifts it
            assert [e.kind for e in events if e.peer == liar] == ["banned", "unbanned"]

    on_mock_clock(body)
