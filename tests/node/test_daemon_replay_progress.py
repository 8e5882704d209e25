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
