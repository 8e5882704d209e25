"""The replay driver passes the step core's progress on with the step filled in, and changes no result."""

from dataclasses import replace

from p2paudit.audit.replay import StepRange, open_run, verify_range
from p2paudit.audit.streamed_replay import verify_range_streamed
from p2paudit.engine.progress import StepProgress
from p2paudit.engine.state import param_shapes


def events_of_one_step(cfg) -> int:
    """engine.progress's count: every layer forward and backward, every micro-batch, every parameter."""
    return cfg.micro_batches * (2 * cfg.model.n_layer + 1) + len(param_shapes(cfg.model))


def timeless(report):
    return [replace(a, seconds=0.0) for a in report.audits], [(d.step, d.tensors, d.diffs) for d in report.diagnoses]


def test_progress_names_each_replayed_step_and_changes_nothing(traced_run, tmp_path):
    view = open_run(traced_run)
    steps = StepRange(False, 1, 1)  # replayed from checkpoint 0: step 0 runs too (it makes step 1's input)
    unwatched = verify_range(view, steps, "cpu", diagnose=False)
    per_step = events_of_one_step(view.cfg)
    for replay in ("in-memory", "streaming"):
        seen: list[StepProgress] = []
        if replay == "in-memory":
            watched = verify_range(view, steps, "cpu", diagnose=False, progress=seen.append)
        else:
            watched = verify_range_streamed(view, steps, "cpu", tmp_path / "scratch", progress=seen.append)
        assert timeless(watched) == timeless(unwatched) and watched.all_match
        assert [e.step for e in seen] == [0] * per_step + [1] * per_step
        for n in (0, 1):
            fractions = [e.fraction() for e in seen if e.step == n]
            assert fractions[-1] == 1.0 and all(a <= b for a, b in zip(fractions, fractions[1:]))
