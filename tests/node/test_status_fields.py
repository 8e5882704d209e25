"""node.status: the busy step's progress (from node.replays, where the auditor's replay reports), bans and sync."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.engine.progress import StepProgress
from p2paudit.identity import identity_from_seed
from p2paudit.node.assign.replays import REPLAYS
from p2paudit.node.daemon.daemon import DaemonConfig
from p2paudit.node.daemon.status import progress_as_of, read_status, snapshot, write_status

RUN = hashlib.sha256(b"status fields run").digest()
ME = identity_from_seed(hashlib.sha256(b"status fields key").digest())
BANS = [{"peer": "12D3KooWBad", "reason": "sent a bad page", "until": 1_900_000_000.0}]
SYNC = [
    {"peer": "12D3KooWOk", "state": "ok", "last_ok": 1_800_000_000.0, "next_try": None, "error": None},
    {"peer": "12D3KooWBad", "state": "backing-off", "last_ok": None, "next_try": 1.9e9, "error": "timed out"},
]


def live(busy: tuple[bytes, int] | None, **extra) -> dict:
    return {
        "listen": [],
        "peers": [],
        "audited": 0,
        "received": 0,
        "events": [],
        "busy": busy,
        "health": {},
        "remote": [],
        **extra,
    }


@pytest.fixture
def store(tmp_path):
    with AttestationStore.open(tmp_path / "ledger.db", origin_for(ME.public_key)) as opened:
        yield opened


def test_busy_progress_bans_and_sync_reach_the_status_file(tmp_path, store) -> None:
    config = DaemonConfig((), tmp_path / "ledger.db", tmp_path / "status.json")
    with REPLAYS.watching(RUN, 12) as hook:
        before = snapshot(store, ME, config, [], live((RUN, 12)))
        for layer in range(1, 4):  # three of eight layers of the first of two micro-batches
            hook(StepProgress("micro-batch", 0, 2, layer, 8))
        during = snapshot(store, ME, config, [], live((RUN, 12), bans=BANS, sync=SYNC))
    after = snapshot(store, ME, config, [], live((RUN, 12)))
    assert before.busy == {"run_id": RUN.hex(), "step": 12, "progress": None}  # nothing reported yet
    progress = during.busy["progress"]
    assert progress["step"] == 12 and progress["phase"] == "micro-batch"  # the board fills in the step
    assert progress["fraction"] == pytest.approx(3 / 17, abs=1e-6)
    assert progress["counts"]["layers_done"] == 3 and progress["counts"]["micro_batches"] == 2
    assert after.busy["progress"] is None  # the replay ended
    write_status(config.status_path, during)
    written = read_status(config.status_path)
    assert written["bans"] == BANS and written["sync"] == SYNC
    assert written["busy"]["progress"] == json.loads(json.dumps(progress))


def test_a_daemon_that_reports_no_bans_or_sync_writes_empty_lists(tmp_path, store) -> None:
    config = DaemonConfig((), tmp_path / "ledger.db", tmp_path / "status.json")
    status = snapshot(store, ME, config, [], live(None))
    assert status.busy is None and status.bans == [] and status.sync == []


def test_a_reader_ages_the_progress_by_the_status_age() -> None:
    progress = {"step": 3, "phase": "micro-batch", "fraction": 0.5, "counts": {}, "elapsed": 10.0, "eta_seconds": 10.0}
    status = {"written_at": 1000.0, "busy": {"run_id": RUN.hex(), "step": 3, "progress": progress}}
    aged = progress_as_of(status, 1004.0)
    assert aged["elapsed"] == pytest.approx(14.0) and aged["eta_seconds"] == pytest.approx(6.0)
    assert progress_as_of(status, 1100.0)["eta_seconds"] == 0.0
    assert progress_as_of({"written_at": 1000.0, "busy": {"run_id": RUN.hex(), "step": 3}}, 1004.0) is None
    assert progress_as_of({"written_at": 1000.0, "busy": None}, 1004.0) is None


def test_p2paudit_status_shows_the_replay_with_time_left_bans_and_sync(tmp_path) -> None:
    from click.testing import CliRunner

    from p2paudit.cli import cli
    from p2paudit.node.daemon.status import Status

    written = time.time() - 4.0  # a status four seconds old: the time left shown is 4 s less than written
    progress = {
        "step": 12,
        "phase": "micro-batch",
        "fraction": 0.4,
        "counts": {"micro_batches_done": 1, "micro_batches": 4, "layers_done": 3, "layers": 8},
        "elapsed": 40.0,
        "eta_seconds": 60.0,
    }
    busy = {"run_id": RUN.hex(), "step": 12, "progress": progress}
    status = Status(1, written, "12D3KooWMe", "00", [], [], {"path": "l", "size": 0}, 0, 0, busy, [], 0, [], {}, [])
    write_status(tmp_path / "status.json", Status(**{**status.__dict__, "bans": BANS, "sync": SYNC}))
    shown = CliRunner().invoke(cli, ["status"], env={"P2PAUDIT_HOME": str(tmp_path)})
    assert shown.exit_code == 0, shown.output
    line = next(line for line in shown.output.splitlines() if line.startswith("replaying step 12"))
    assert "40% (micro-batch 2/4, layer 3/8)" in line
    assert "0:44 elapsed, 0:56 left" in line or "0:45 elapsed, 0:55 left" in line
    assert "1 peer(s) banned" in shown.output and "banned 12D3KooWBad: sent a bad page" in shown.output
    assert "sync 12D3KooWOk: ok, last ok" in shown.output
    assert "sync 12D3KooWBad: backing-off, last ok never, next try in" in shown.output and "(timed out)" in shown.output
