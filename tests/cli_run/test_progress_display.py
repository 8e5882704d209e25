"""cli.progress_display: JSON lines with --json, a bar on a terminal, nothing in a pipe (events built by hand)."""

from __future__ import annotations

import io
import json

from rich.console import Console

from p2paudit.cli.progress_display import describe_counts, format_seconds, json_events, step_progress, terminal_bar
from p2paudit.engine.progress import StepProgress
from p2paudit.run.progress_meter import ProgressView


def one_step(step: int) -> list[StepProgress]:
    events = [StepProgress("micro-batch", mb, 2, layer, 4, step=step) for mb in range(2) for layer in range(1, 5)]
    return events + [StepProgress("update", 2, 2, 0, 4, p, 5, step=step) for p in range(1, 6)]


def test_json_events_are_lines_of_the_documented_shape_ending_at_one() -> None:
    out = io.StringIO()
    with json_events(out) as hook:
        for step in (0, 1):
            for event in one_step(step):
                hook(event)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines, "no event written"
    for line in lines:
        assert set(line) == {"event", "step", "phase", "fraction", "counts", "elapsed", "eta_seconds"}
        assert line["event"] == "progress" and 0.0 <= line["fraction"] <= 1.0
    assert [line["step"] for line in lines if line["fraction"] == 1.0] == [0, 1]
    assert len(lines) < 2 * len(one_step(0))  # rate-limited: not one line per event


def test_a_closed_stream_never_stops_the_step() -> None:
    out = io.StringIO()
    with json_events(out) as hook:
        out.close()
        for event in one_step(0):
            hook(event)  # no exception


def test_the_terminal_bar_shows_step_share_place_and_time_left() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=160, color_system=None)
    with terminal_bar(console) as display:
        for event in one_step(42)[:5]:
            display.hook(event)
        console.file.flush()
        shown = buffer.getvalue()
    assert "step 42" in shown and "micro-batch" in shown and "left" in shown


def test_no_hook_in_a_pipe(monkeypatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal
    with step_progress(as_json=False) as display:
        assert display.hook is None


def test_where_and_how_long_in_words() -> None:
    counts = {"micro_batches_done": 2, "micro_batches": 8, "layers_done": 5, "layers": 24}
    assert describe_counts(ProgressView(0, "micro-batch", 0.3, counts)) == "micro-batch 3/8, layer 5/24"
    assert describe_counts(ProgressView(0, "update", 0.99, {"params_done": 4, "params": 9})) == "update 4/9 tensors"
    assert format_seconds(None) == "?" and format_seconds(65) == "1:05" and format_seconds(3723) == "1:02:03"


def test_train_display_draws_the_run_and_the_step_on_a_terminal() -> None:
    from p2paudit.cli.progress_display import train_display
    from p2paudit.run.training import StepDone

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=200, color_system=None)
    with train_display(10, as_json=False, console=console) as (on_step, within):
        on_step(StepDone(3, 10, 2.25, 0))
        for event in one_step(4)[:3]:
            within(event)
        shown = buffer.getvalue()
    assert "step 4/10, loss 2.2500" in shown and "steps/s" in shown
    assert "step 4" in shown and "micro-batch 1/2, layer" in shown and "left" in shown


def test_train_display_with_json_writes_step_and_progress_lines_on_stderr(monkeypatch) -> None:
    from p2paudit.cli.progress_display import train_display
    from p2paudit.run.training import StepDone

    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with train_display(2, as_json=True) as (on_step, within):
        for event in one_step(0):
            within(event)
        on_step(StepDone(0, 2, 1.5, 0))
    lines = [json.loads(line) for line in err.getvalue().splitlines()]
    assert {line["event"] for line in lines} == {"progress", "step"}
    assert lines[-1]["event"] == "step" and lines[-1]["step"] == 0 and lines[-1]["loss"] == 1.5
    assert [line["fraction"] for line in lines if line["event"] == "progress"][-1] == 1.0


def test_train_display_in_a_pipe_draws_nothing(monkeypatch) -> None:
    from p2paudit.cli.progress_display import train_display
    from p2paudit.run.training import StepDone

    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with train_display(2, as_json=False) as (on_step, within):
        on_step(StepDone(0, 2, 1.5, 0))
    assert within is None and err.getvalue() == ""


class TerminalOut(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_for_stdout_go_above_the_bar_when_stdout_is_its_terminal(monkeypatch) -> None:
    buffer, out = io.StringIO(), TerminalOut()
    console = Console(file=buffer, force_terminal=True, width=160, color_system=None)
    monkeypatch.setattr("sys.stdout", out)
    with terminal_bar(console) as display:
        display.hook(one_step(1)[0])
        display.echo("step      1  match")
    assert "step      1  match" in buffer.getvalue() and out.getvalue() == ""  # drawn by the bar's console
    monkeypatch.setattr("sys.stdout", io.StringIO())  # stdout a pipe or a file: the line goes there
    with terminal_bar(Console(file=io.StringIO(), force_terminal=True)) as display:
        display.echo("step      2  match")
    assert __import__("sys").stdout.getvalue() == "step      2  match\n"
