"""The training loop passes the step core's progress on with the step filled in, and writes the same run."""

from pathlib import Path

from p2paudit.engine.config import train_config
from p2paudit.engine.progress import StepProgress
from p2paudit.engine.state import param_shapes
from p2paudit.run.publisher import TrainPlan, publish_run


def _files(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def test_training_reports_each_step_and_writes_the_same_files(tmp_path, publisher):
    plan = dict(config="tiny", steps=2, ckpt_every=2, micro_batches=2, backend="cpu")
    publish_run(TrainPlan(tmp_path / "plain", **plan), publisher)
    cfg = train_config("tiny", micro_batches=2, steps=2)
    per_step = 2 * (2 * cfg.model.n_layer + 1) + len(param_shapes(cfg.model))
    for mode in ("in-memory", "streaming"):
        seen: list[StepProgress] = []
        run_dir = tmp_path / mode
        publish_run(TrainPlan(run_dir, **plan), publisher, mode=mode, scratch_dir=tmp_path / "s", progress=seen.append)
        assert _files(run_dir) == _files(tmp_path / "plain")
        assert [e.step for e in seen] == [0] * per_step + [1] * per_step
        assert [e.fraction() for e in seen[per_step - 1 :: per_step]] == [1.0, 1.0]
