"""A resumed run removes every temp file a killed writer left, in checkpoints/ and traces/ too (issue 7 B12)."""

from pathlib import Path

import pytest

from p2paudit.identity import identity_from_seed
from p2paudit.run.publisher import PROGRESS_FILE, TrainPlan, publish_run

PUBLISHER = identity_from_seed(b"\x44" * 32)


class Killed(Exception):
    """Stands for the SIGKILL that stops a publisher between two steps."""


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.mark.slow  # 3 s (fast tier: pytest -m 'not slow')
def test_resume_leaves_no_stale_temp_file_anywhere(tmp_path):
    plan = dict(config="tiny", steps=4, ckpt_every=2, backend="reference", traces=True, arithmetic=1)  # v1: quicker
    whole = tmp_path / "whole"
    publish_run(TrainPlan(whole, **plan), PUBLISHER)

    killed = tmp_path / "killed"

    def stop_after_step_2(done) -> None:
        if done.step == 2:
            raise Killed

    with pytest.raises(Killed):
        publish_run(TrainPlan(killed, **plan), PUBLISHER, stop_after_step_2)
    assert (killed / PROGRESS_FILE).exists()
    # What a writer killed in the middle of an atomic write leaves behind.
    for relative in (
        "checkpoints/.step-00000004.safetensors.4242.tmp",
        "traces/.step-00000003.trace.4242.tmp",
        "shards/.shard-00000.bin.4242.tmp",
        ".manifest.json.4242.tmp",
    ):
        (killed / relative).write_bytes(b"half a file")

    publish_run(TrainPlan(killed, **plan), PUBLISHER)
    assert _files(killed) == _files(whole)
