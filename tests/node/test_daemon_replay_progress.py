"""The daemon's replay reports its progress where the status file reads it (node.replays): a real replay of a
tiny run's step, its busy.progress taken at each event, from inside the replay."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from p2paudit.audit.replay import open_run
from p2paudit.identity import identity_from_seed
from p2paudit.node.assign import auditor
from p2paudit.node.assign.replays import ReplayBoard
from p2paudit.node.daemon import status
from p2paudit.run.publisher import TrainPlan, publish_run


class SnapshotAtEachEvent(ReplayBoard):
    """The real board, plus: at each event, what the status file would say then (busy_view)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict] = []

    @contextmanager
    def watching(self, run_id: bytes, step: int):
        with super().watching(run_id, step) as hook:

            def spy(event) -> None:
                hook(event)
                self.seen.append(status.busy_view(run_id, step))

            yield spy


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("progress") / "run"
    publish_run(
        # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
        TrainPlan(run_dir, "tiny", steps=2, ckpt_every=1, backend="reference", arithmetic=1),
        identity_from_seed(b"\x05" * 32),
    )
    return open_run(run_dir)


def test_a_status_written_mid_replay_holds_busy_progress(tiny_run, monkeypatch) -> None:
    board = SnapshotAtEachEvent()
    monkeypatch.setattr(auditor, "REPLAYS", board)
    monkeypatch.setattr(status, "REPLAYS", board)
    audits = auditor.replay_step(tiny_run, 1, "reference", auditor.AuditPolicy())
    assert [a.verdict for a in audits] == ["match"]
    progress = [seen["progress"] for seen in board.seen]
    assert progress and all(p is not None and p["step"] == 1 for p in progress)
    fractions = [p["fraction"] for p in progress]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and fractions[0] < 0.5
    assert {p["phase"] for p in progress} == {"micro-batch", "update"}
    assert board.progress(tiny_run.manifest.run_id, 1) is None  # forgotten once the replay ends


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_daemon_gives_memory_back_when_it_goes_idle_after_replays(tiny_run, tmp_path, monkeypatch) -> None:
    """The audit loop releases the heap's freed memory once it finds no step after replaying (never while a
    replay runs), and not again until it has replayed once more."""
    import trio

    from p2paudit.node.daemon import audit as daemon_audit
    from p2paudit.node.daemon.daemon import DaemonConfig
    from p2paudit.node.daemon.run import run_daemon
    from p2paudit.node.daemon.sources import LocalSource

    calls: list[tuple[bool, int]] = []
    replays: list[int] = []
    replay_step = auditor.replay_step

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        replays.append(args[1])
        return replay_step(*args, **kwargs)

    def release() -> bool:
        busy = any(board.progress(tiny_run.manifest.run_id, step) is not None for step in (0, 1))
        calls.append((busy, len(replays)))
        return True

    board = ReplayBoard()
    monkeypatch.setattr(auditor, "REPLAYS", board)
    monkeypatch.setattr(auditor, "replay_step", counted)
    monkeypatch.setattr(daemon_audit, "release_replay_memory", release)
    config = DaemonConfig(
        runs=(LocalSource(tiny_run),),
        ledger_path=tmp_path / "ledger.db",
        status_path=tmp_path / "status.json",
        backend="reference",
        policy=auditor.AuditPolicy(redundancy=1, scratch_dir=tmp_path / "scratch"),
        duration=8.0,
        linger=1.0,
    )
    trio.run(run_daemon, identity_from_seed(b"\x06" * 32), config, lambda event: None)
    assert sorted(replays) == [0, 1]
    assert calls and calls[-1][1] == 2, calls  # after the last replay
    assert not any(busy for busy, _ in calls), calls  # never while a replay ran
    counts = [n for _, n in calls]
    assert counts == sorted(set(counts)), calls  # never twice without a replay between
