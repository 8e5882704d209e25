"""Progress within a step on the command line: a rich bar on a terminal, JSON lines with --json, nothing in a pipe.

`step_progress(as_json)` (verify-range) and `train_display` (train) give the
ProgressHook to hand to a replay or to training (None: no hook, no cost) and
draw what run.progress_meter makes of its events:

- with --json: one JSON object per line on stderr (stdout keeps the command's
  one result document), `{"event": "progress", "step", "phase", "fraction",
  "counts", "elapsed", "eta_seconds"}`, at most 4 a second plus each step's last;
- else, when stderr is a terminal: a transient bar on stderr (step, share,
  micro-batch and layer, or parameters updated, elapsed, time left);
- else (a pipe, a file): nothing.

Both also say, once, when the cpu kernels are being compiled (numba found
no cached code: the first run on a machine, about a minute): a line on
stderr, above the bar, or with --json `{"event": "compiling", "backend":
"cpu", "text"}`; a run that loads them from the cache says nothing.

`p2paudit status` uses `busy_line` for a daemon's replay (its status file's busy.progress).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

    from p2paudit.engine.progress import ProgressHook, StepProgress
    from p2paudit.run.progress_meter import ProgressView
    from p2paudit.run.training import StepDone


def describe_counts(view: ProgressView) -> str:
    """Where the step is: 'micro-batch 3/8, layer 5/24' or 'update 40/120 tensors'."""
    c = view.counts
    if view.phase == "update":
        return f"update {c.get('params_done', 0)}/{c.get('params', 0)} tensors"
    current = min(c.get("micro_batches_done", 0) + 1, c.get("micro_batches", 0))
    return f"micro-batch {current}/{c.get('micro_batches', 0)}, layer {c.get('layers_done', 0)}/{c.get('layers', 0)}"


def format_seconds(seconds: float | None) -> str:
    """'1:02:03', '4:05', or '?' when not known yet."""
    if seconds is None:
        return "?"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


@contextmanager
def json_events(stream: TextIO | None = None) -> Iterator[ProgressHook]:
    """A hook that writes the meter's views as JSON lines on `stream` (default: stderr)."""
    from p2paudit.run.progress_meter import ProgressMeter, event_line

    meter, out = ProgressMeter(), stream if stream is not None else sys.stderr

    def hook(event: StepProgress) -> None:
        view = meter.observe(event)
        if view is not None:
            _write_line(out, json.dumps(event_line(view)))

    yield hook


def _bar(console: Console | None) -> Progress:
    """A transient rich Progress on `console` (default: stderr): description, bar, share, and a line of text."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

    console = console if console is not None else Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[info]}"))
    # Lines for stdout go through `echo_line` (above the bar when stdout is that terminal too), never rich's
    # redirection: click writes to stdout's buffer, past rich's proxy, and would land on the bar's line.
    return Progress(*columns, console=console, transient=True, redirect_stdout=False, redirect_stderr=False)


def _shares_terminal(console: Console) -> bool:
    return console.is_terminal and sys.stdout.isatty()


def echo_line(bar: Progress | None) -> Callable[[str], None]:
    """How a command prints a line on stdout while `bar` may be drawn: above the bar, through its console, when
    stdout is the bar's terminal; else click.echo (a pipe or a file: nothing to draw over)."""
    import click

    if bar is None or not _shares_terminal(bar.console):
        return click.echo
    return lambda line: bar.console.print(line, markup=False, highlight=False, soft_wrap=True)


def _within_step(bar: Progress) -> ProgressHook:
    """A hook drawing the current step's share, place, elapsed and time left as a task of `bar`."""
    from p2paudit.run.progress_meter import ProgressMeter

    task, meter = bar.add_task("step", total=1.0, info=""), ProgressMeter()

    def hook(event: StepProgress) -> None:
        view = meter.observe(event)
        if view is None:
            return
        info = (
            f"{describe_counts(view)}; {format_seconds(view.elapsed)} elapsed, {format_seconds(view.eta_seconds)} left"
        )
        bar.update(
            task, completed=view.fraction, description="step" if view.step is None else f"step {view.step}", info=info
        )
        bar.refresh()  # at most 4 a second (the meter's limit): drawn now, not at the next tick

    return hook


@dataclass(frozen=True)
class StepDisplay:
    """What a command that replays or trains steps gets: the hook for the step core (None: nothing shown), and
    how to print a line on stdout meanwhile (above the bar when one shares the terminal)."""

    hook: ProgressHook | None
    echo: Callable[[str], None]


@contextmanager
def terminal_bar(console: Console | None = None) -> Iterator[StepDisplay]:
    """A transient rich bar of the current step on `console` (default: stderr)."""
    with _bar(console) as bar:
        yield StepDisplay(_within_step(bar), echo_line(bar))


COMPILING = "compiling the cpu kernels once (about a minute; later runs load them from numba's cache)..."


def _tell_compiling(as_json: bool, bar: Progress | None) -> Callable[[], None]:
    """How the one-time kernel compile is told on stderr: a JSON event with --json, a line above the bar, or a line."""

    def tell() -> None:
        if as_json:
            _write_line(sys.stderr, json.dumps({"event": "compiling", "backend": "cpu", "text": COMPILING}))
        elif bar is not None:
            bar.console.print(COMPILING, markup=False, highlight=False, soft_wrap=True)
        else:
            _write_line(sys.stderr, COMPILING)

    return tell


@contextmanager
def telling_compiles(as_json: bool, bar: Progress | None = None) -> Iterator[None]:
    """Say on stderr, once, when the cpu kernels are compiled (numba's cache missed), never when they are loaded."""
    from p2paudit.engine.backends import compile_notice

    with compile_notice(_tell_compiling(as_json, bar)):
        yield


@contextmanager
def step_progress(as_json: bool) -> Iterator[StepDisplay]:
    """This command's display: JSON lines with --json, a bar on a terminal's stderr, else no hook."""
    import click

    if as_json:
        with json_events() as hook, telling_compiles(True):
            yield StepDisplay(hook, click.echo)
    elif sys.stderr.isatty():
        with _bar(None) as bar, telling_compiles(False, bar):
            yield StepDisplay(_within_step(bar), echo_line(bar))
    else:
        with telling_compiles(False):
            yield StepDisplay(None, click.echo)


StepHook = Callable[["StepDone"], None]


@contextmanager
def train_display(
    total: int, as_json: bool, console: Console | None = None
) -> Iterator[tuple[StepHook, ProgressHook | None]]:
    """`train`'s (on each finished step, within each step) callbacks: with --json, JSON lines on stderr (a
    {"event": "step", "step", "loss", "steps_per_second"} per step, progress events within); on a terminal, two
    transient bars on stderr (the run's steps, the current step); else nothing."""
    started = time.perf_counter()

    def rate(done: StepDone) -> float:
        return (done.step + 1 - done.resumed_from) / max(time.perf_counter() - started, 1e-9)

    if as_json:
        with json_events() as hook, telling_compiles(True):

            def on_step_json(done: StepDone) -> None:
                line = {"event": "step", "step": done.step, "loss": done.loss, "steps_per_second": round(rate(done), 4)}
                _write_line(sys.stderr, json.dumps(line))

            yield on_step_json, hook
        return
    if console is None and not sys.stderr.isatty():
        with telling_compiles(False):
            yield (lambda done: None), None
        return
    with _bar(console) as bar, telling_compiles(False, bar):
        run_task = bar.add_task("train", total=total, info="")

        def on_step(done: StepDone) -> None:
            info = f"step {done.step + 1}/{total}, loss {done.loss:.4f}, {rate(done):.2f} steps/s"
            bar.update(run_task, completed=done.step + 1, info=info)

        yield on_step, _within_step(bar)


def _write_line(out: TextIO, line: str) -> None:
    try:
        out.write(line + "\n")
        out.flush()
    except (OSError, ValueError):  # a reader gone (closed pipe): a callback never stops the work it watches
        pass


def busy_line(status: dict[str, Any], now: float) -> str | None:
    """`p2paudit status`'s line for the step being replayed: 'replaying step 12 of run ab12..: 40% (micro-batch
    2/4, layer 3/8), 0:41 elapsed, 1:02 left', the progress aged by the status's age; None when idle."""
    from p2paudit.node.daemon.status import progress_as_of
    from p2paudit.run.progress_meter import view_from_dict

    busy = status.get("busy")
    if not isinstance(busy, dict):
        return None
    line = f"replaying step {busy.get('step')} of run {str(busy.get('run_id', ''))[:16]}.."
    view = view_from_dict(progress_as_of(status, now))
    if view is None:
        return line
    return (
        f"{line}: {view.fraction:.0%} ({describe_counts(view)}), {format_seconds(view.elapsed)} elapsed, "
        f"{format_seconds(view.eta_seconds)} left"
    )
