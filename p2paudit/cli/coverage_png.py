"""`ledger coverage --png`: the run's coverage as the explorer's strip draws it, readable at 100,000 steps and more.

The steps are aggregated into at most COLUMNS buckets by explorer.coverage
(the SQL the page uses), so the picture costs one pass over the index and the
same few thousand shapes whatever the run's length. Per bucket, as fractions
of its steps: checked at least R times, checked fewer times, unchecked;
buckets holding a mismatch or a dispute are marked under the axis. The
initial state (the init claim: state 0 as the recipe builds it) is no step:
its verdicts are a line of the title and a bar left of step 0, red when a
key signed a mismatch for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from p2paudit.attest.queries import StepCoverage, initial_state_coverage
from p2paudit.attest.store import AttestationStore
from p2paudit.explorer.coverage import CoverageStrip, bucket_coverage

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

COLUMNS = 1000  # = the page's strip
COLORS = {
    "covered": "#2e8b3a",
    "under": "#9ad19a",
    "unchecked": "#d9d9d9",
    "mismatch": "#d62728",
    "disputed": "#7b1fa2",
}


def write_coverage_png(
    path: Path, store: AttestationStore, run_id: bytes, trusted: frozenset[bytes] | None, min_count: int
) -> None:
    """Aggregate (all keys, and the trusted ones when given) and draw the PNG at `path`."""
    everyone = bucket_coverage(store, run_id, buckets=COLUMNS, min_count=min_count)
    chosen = bucket_coverage(store, run_id, buckets=COLUMNS, min_count=min_count, trusted=trusted) if trusted else None
    draw(path, everyone, chosen, initial_state_coverage(store, run_id))


def _edges(strip: CoverageStrip) -> list[int]:
    return [b.start for b in strip.buckets] + [strip.stop]


def _fractions(strip: CoverageStrip, field: str) -> list[float]:
    values = [getattr(b, field) / b.steps for b in strip.buckets]
    return values + values[-1:]  # one value per edge, for a step-wise fill


def initial_state_caption(initial: StepCoverage | None) -> str:
    """The title's line for the init claim (all keys)."""
    if initial is None:
        return "initial state: no attestation"
    verdicts = f"{initial.match} match, {initial.mismatch} mismatch, {initial.error} error"
    return f"initial state: checked by {initial.checked} keys ({verdicts})"


def _initial_state_color(initial: StepCoverage | None) -> str:
    if initial is None or not initial.checked:
        return COLORS["unchecked"]
    if initial.mismatch:
        return COLORS["disputed"] if initial.match else COLORS["mismatch"]
    return COLORS["covered"]


def draw(
    path: Path, everyone: CoverageStrip, trusted: CoverageStrip | None, initial: StepCoverage | None = None
) -> Figure:
    """Stacked fractions per bucket (all keys), trusted keys' share checked >= R as a line, markers for disputes,
    the initial state's verdicts (`initial`) in the title and as a bar left of step 0; the Figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 4), dpi=100)
    FigureCanvasAgg(fig)  # no pyplot: no global backend or figure registry
    ax = fig.subplots()
    x, covered = _edges(everyone), _fractions(everyone, "covered_steps")
    checked = _fractions(everyone, "checked_steps")
    r = everyone.min_count
    ax.fill_between(x, 0, covered, step="post", color=COLORS["covered"], label=f"checked >= {r}x (all keys)")
    ax.fill_between(x, covered, checked, step="post", color=COLORS["under"], label=f"checked < {r}x")
    ax.fill_between(x, checked, 1, step="post", color=COLORS["unchecked"], label="unchecked")
    if trusted is not None:
        ax.step(x, _fractions(trusted, "covered_steps"), where="post", color="tab:blue", label=f"trusted keys >= {r}x")
    _mark(ax, everyone)
    width = everyone.stop - everyone.start
    ax.broken_barh([(everyone.start - width / 50, width / 80)], (0.0, 1.0), color=_initial_state_color(initial))
    ax.set_xlim(everyone.start - width / 40, everyone.stop)
    ax.set_ylim(-0.08, 1.0)
    ax.set_xlabel("step")
    ax.set_ylabel("share of the steps in a column")
    total = everyone.totals
    label = f" ({everyone.run.label[:40]})" if everyone.run.label else ""
    ax.set_title(
        f"run {everyone.run.run_id.hex()[:16]}{label}: {total.checked_steps} of {width} steps checked, "
        f"{total.disputed_steps} disputed, {total.mismatch_steps} with a mismatch "
        f"({len(everyone.buckets)} columns of {width / len(everyone.buckets):.3g} steps)\n"
        f"{initial_state_caption(initial)} (the bar left of step 0)"
    )
    ax.legend(loc="upper right", fontsize="small", framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return fig


def _mark(ax: Axes, strip: CoverageStrip) -> None:
    """A tick under the axis for every bucket with a mismatch (red) or a dispute (purple), at least visible."""
    least = (strip.stop - strip.start) / 400  # 3 pixels of the 1,200 the figure is wide
    for name, field, low in (("mismatch", "mismatch_steps", -0.075), ("disputed", "disputed_steps", -0.045)):
        spans = [(min(b.start, strip.stop - least), max(b.steps, least)) for b in strip.buckets if getattr(b, field)]
        if spans:
            ax.broken_barh(spans, (low, 0.03), color=COLORS[name], label=f"{name} step(s)")
