"""`p2paudit plan`: how much of a run N volunteers cover, and how likely a falsified step is caught.

A thin adapter over `p2paudit.node.plan`: parse, compute, print text or --json.
"""

from __future__ import annotations

import json
import math

import click

from p2paudit.cli import cli

COVERAGE_TARGET = 0.99


def _pm(mean: float, stderr: float, scale: float = 1.0, digits: int = 1) -> str:
    if math.isnan(stderr):
        return f"{mean * scale:,.{digits}f}"
    return f"{mean * scale:,.{digits}f} ± {stderr * scale:,.{digits}f}"


@cli.command()
@click.option("--steps", "steps", type=int, required=True, help="Steps in the run (S).")
@click.option("--volunteers", type=int, required=True, help="Volunteers auditing it (N).")
@click.option("--per-volunteer", type=int, required=True, help="Steps each volunteer audits (k).")
@click.option("--redundancy", type=int, default=2, show_default=True, help="Auditors per step (r).")
@click.option("--churn", type=float, default=0.0, show_default=True, help="Fraction never reporting.")
@click.option("--dishonest", type=float, default=0.0, show_default=True, help="Fraction always saying match.")
@click.option(
    "--spill/--no-spill",
    default=True,
    show_default=True,
    help="Volunteers with spare capacity take steps nobody checked, as the daemon does.",
)
@click.option("--trials", type=int, default=10, show_default=True, help="Monte Carlo trials.")
@click.option("--seed", type=int, default=0, show_default=True, help="Monte Carlo seed.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
def plan(
    steps: int,
    volunteers: int,
    per_volunteer: int,
    redundancy: int,
    churn: float,
    dishonest: float,
    spill: bool,
    trials: int,
    seed: int,
    as_json: bool,
) -> None:
    """Expected coverage of a run and P(one falsified step is caught).

    Each step goes to the r volunteers that rendezvous hashing ranks highest;
    each volunteer audits k of its assigned steps. Figures come by Monte Carlo
    over the real assignment function (seeded) and by closed form; the model
    is documented in docs/network.md. Out-of-range values exit 2 with one line.
    """
    from p2paudit.node.plan import Scenario, closed_form, monte_carlo, per_volunteer_for

    scenario = Scenario(steps, volunteers, per_volunteer, redundancy, churn, dishonest, spill)
    exact = closed_form(scenario)
    mc = monte_carlo(scenario, trials=trials, seed=seed)
    k_target = per_volunteer_for(scenario, COVERAGE_TARGET)
    if as_json:
        out = {
            "scenario": {
                "steps": steps,
                "volunteers": volunteers,
                "per_volunteer": per_volunteer,
                "redundancy": redundancy,
                "effective_redundancy": scenario.effective_redundancy,
                "churn": churn,
                "dishonest": dishonest,
                "spill": spill,
            },
            "closed_form": {
                "covered_steps": exact.covered_steps(steps),
                "covered_fraction": exact.covered_fraction,
                "caught_probability": exact.caught_probability,
                "pick_probability": exact.pick_probability,
                "expected_audits": exact.expected_audits,
            },
            "monte_carlo": {
                "method": mc.method,
                "trials": mc.trials,
                "seed": seed,
                "steps_per_trial": mc.steps_per_trial,
                "covered_steps": mc.covered_mean * steps,
                "covered_steps_stderr": None if math.isnan(mc.covered_stderr) else mc.covered_stderr * steps,
                "covered_fraction": mc.covered_mean,
                "caught_probability": mc.caught_mean,
                "caught_probability_stderr": None if math.isnan(mc.caught_stderr) else mc.caught_stderr,
            },
            "per_volunteer_for_99_percent": k_target,
        }
        click.echo(json.dumps(out, indent=2))
        return
    method = (
        f"exact assignment of all {steps:,} steps"
        if mc.method == "exact"
        else f"{mc.steps_per_trial:,} sampled steps per trial, loads drawn"
    )
    click.echo(
        f"run of {steps:,} steps, {volunteers:,} volunteers x {per_volunteer:,} steps, "
        f"redundancy {scenario.effective_redundancy}, churn {churn:g}, dishonest {dishonest:g}, "
        f"{'spill-over to unchecked steps' if spill else 'assigned steps only'}"
    )
    rows = [
        ("", "monte carlo", "closed form"),
        (
            "distinct steps covered",
            _pm(mc.covered_mean, mc.covered_stderr, steps),
            f"{exact.covered_steps(steps):,.1f}",
        ),
        (
            "fraction covered",
            _pm(mc.covered_mean, mc.covered_stderr, 100.0, 2) + " %",
            f"{exact.covered_fraction * 100:.2f} %",
        ),
        (
            "P(falsified step caught)",
            _pm(mc.caught_mean, mc.caught_stderr, 1.0, 4),
            f"{exact.caught_probability:.4f}",
        ),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        click.echo(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}")
    click.echo(f"monte carlo: {mc.trials} trials, seed {seed}, {method}")
    target = "unreachable (churn caps coverage)" if k_target is None else f"{k_target:,}"
    click.echo(f"per-volunteer k for {COVERAGE_TARGET:.0%} expected coverage: {target}")
