"""run.progress_meter: a step core's events turned into share, elapsed, time left, and which of them to show."""

from __future__ import annotations

import json

import pytest

from p2paudit.engine.progress import StepProgress
from p2paudit.run.progress_meter import ProgressMeter, ProgressView, event_line, time_left, view_from_dict


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def step_events(step: int | None, micro_batches: int = 2, layers: int = 4, params: int = 3) -> list[StepProgress]:
    """Every event a step core reports for one step, in order (as engine/progress.py describes them)."""
    events = []
    for mb in range(micro_batches):
        for layer in range(1, layers + 1):
            events.append(StepProgress("micro-batch", mb, micro_batches, layer, layers, step=step))
        events.append(StepProgress("micro-batch", mb + 1, micro_batches, 0, layers, step=step))
    for p in range(1, params + 1):
        events.append(StepProgress("update", micro_batches, micro_batches, 0, layers, p, params, step=step))
    return events


def test_time_left_is_the_average_rate_so_far() -> None:
    assert time_left(0.25, 10.0) == pytest.approx(30.0)
    assert time_left(1.0, 10.0) == 0.0
    assert time_left(0.0, 10.0) is None
    assert time_left(0.5, 0.0) is None


def test_fraction_grows_to_one_and_eta_shrinks_at_a_steady_rate() -> None:
    clock = Clock()
    meter = ProgressMeter(clock, interval=0.0)
    views = []
    for event in step_events(7):
        clock.t += 1.0
        views.append(meter.observe(event))
    fractions = [v.fraction for v in views]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert all(v.step == 7 for v in views)
    # One second per event, equal work per event except the update (one layer's worth in three events).
    first = views[0]
    assert first.elapsed == pytest.approx(1.0)
    assert first.eta_seconds == pytest.approx(1.0 * (1 - first.fraction) / first.fraction)
    assert views[-1].eta_seconds == 0.0 and views[-1].finished
    assert views[-1].counts == {
        "micro_batches_done": 2,
        "micro_batches": 2,
        "layers_done": 0,
        "layers": 4,
        "params_done": 3,
        "params": 3,
    }


def test_views_are_rate_limited_but_each_steps_last_is_shown() -> None:
    clock = Clock()
    meter = ProgressMeter(clock, interval=0.25)
    shown = []
    for step in (0, 1):
        for event in step_events(step, micro_batches=4, layers=6):
            clock.t += 0.01  # 100 events a second
            view = meter.observe(event)
            if view is not None:
                shown.append(view)
    assert len(shown) < 12  # 0.6 s of events: the first, about one per 0.25 s, and each step's last
    finals = [v for v in shown if v.finished]
    assert [v.step for v in finals] == [0, 1]
    assert meter.latest is not None and meter.latest.finished


def test_a_new_step_starts_its_clock_at_the_previous_steps_last_event() -> None:
    clock = Clock()
    meter = ProgressMeter(clock, interval=0.0)
    for event in step_events(0):
        clock.t += 1.0
        meter.observe(event)
    clock.t += 5.0  # between the two steps' work: checkpoint loading, digests
    view = meter.observe(step_events(1)[0])
    assert view is not None and view.step == 1 and view.elapsed == pytest.approx(5.0)


def test_a_driver_that_leaves_step_unset_still_starts_a_new_step_when_the_share_falls() -> None:
    clock = Clock()
    meter = ProgressMeter(clock, interval=0.0)
    for event in step_events(None):
        clock.t += 1.0
        meter.observe(event)
    clock.t += 2.0
    view = meter.observe(step_events(None)[0])
    assert view is not None and view.elapsed == pytest.approx(2.0) and view.fraction < 0.2


def test_now_ages_the_latest_view_and_aged_never_goes_below_zero() -> None:
    clock = Clock()
    meter = ProgressMeter(clock)
    assert meter.now() is None
    clock.t += 2.0
    view = meter.observe(step_events(3)[3])  # half of the first micro-batch
    assert view is not None and view.eta_seconds is not None
    clock.t += 1.5
    later = meter.now()
    assert later.elapsed == pytest.approx(view.elapsed + 1.5)
    assert later.eta_seconds == pytest.approx(view.eta_seconds - 1.5)
    assert view.aged(1e6).eta_seconds == 0.0


def test_dict_form_round_trips_and_bad_input_reads_as_none() -> None:
    view = ProgressView(5, "update", 0.75, {"params_done": 2, "params": 4}, 12.5, 4.0)
    line = json.loads(json.dumps(event_line(view)))
    assert line["event"] == "progress"
    assert set(line) == {"event", "step", "phase", "fraction", "counts", "elapsed", "eta_seconds"}
    assert view_from_dict(line) == view
    for bad in (
        None,
        [],
        {"fraction": "half", "elapsed": 1},
        {"fraction": 0.5},
        {"fraction": float("nan"), "elapsed": 1},
    ):
        assert view_from_dict(bad) is None
