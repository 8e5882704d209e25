"""`p2paudit plan`: how much of a run N volunteers cover, and how likely a falsified step is caught.

A thin adapter over `p2paudit.node.assign.plan`: parse, compute, print text or --json.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import click

from p2paudit.cli import cli
from p2paudit.defaults import DEFAULT_REDUNDANCY

if TYPE_CHECKING:  # the planner is imported inside `plan`
    from p2paudit.node.assign.plan import ClosedForm, MonteCarlo, Scenario

COVERAGE_TARGET = 0.99

# `plan` answers in seconds or says in one line why it would not (issue 14: unbounded, it ran past 90 s at 1.1 GB).
MAX_STEPS = 2**32  # a run has at most 2^32 steps (= run.manifest.MAX_STEPS); a volunteer audits at most as many
# Binomial terms the closed form and the search for the 99% k may sum: about 1 us each, so a few seconds.
# node.plan sums over every count up to the run's length (per_volunteer_for searches k up to S, and each
# closed form at k sums min(k, S) terms twice): at most 2S + 2S (the search) + 2 min(k, S) terms.
CLOSED_FORM_TERMS = 4_000_000
# Each Monte Carlo trial draws a key per volunteer and hashes them all for every sampled step: about 8 us a
# key beyond node.plan's own hashing budget (~1.5 s), so 300,000 keys add about 2.5 s.
KEY_DRAWS = 300_000


def _closed_form_terms(steps: int, per_volunteer: int) -> int:
    return 4 * steps + 2 * min(per_volunteer, steps)


def _check_plan_size(steps: int, volunteers: int, per_volunteer: int, trials: int) -> None:
    """Refuse, in one line, a scenario whose estimates would not finish in seconds (InputError, exit 2)."""
    from p2paudit.errors import InputError

    for name, value in (("--steps", steps), ("--per-volunteer", per_volunteer)):
        if value > MAX_STEPS:
            raise InputError(f"{name} {value} is more than a run's 2^32 = {MAX_STEPS:,} steps")
    if volunteers * trials > KEY_DRAWS:
        raise InputError(
            f"{volunteers:,} volunteers x {trials} trials draw {volunteers * trials:,} keys, more than the "
            f"{KEY_DRAWS:,} plan draws in a few seconds: use fewer --volunteers or --trials"
        )
    terms = _closed_form_terms(steps, per_volunteer)
    if terms > CLOSED_FORM_TERMS:
        most = (
            CLOSED_FORM_TERMS // 6
            if 6 * per_volunteer >= CLOSED_FORM_TERMS
            else (CLOSED_FORM_TERMS - 2 * per_volunteer) // 4
        )
        raise InputError(
            f"a run of {steps:,} steps needs {terms:,} terms of the closed form, more than the "
            f"{CLOSED_FORM_TERMS:,} plan sums in a few seconds: plan at most {most:,} steps"
        )


def _pm(mean: float, stderr: float, scale: float = 1.0, digits: int = 1) -> str:
    if math.isnan(stderr):
        return f"{mean * scale:,.{digits}f}"
    return f"{mean * scale:,.{digits}f} ± {stderr * scale:,.{digits}f}"


@cli.command()
@click.option("--steps", "steps", type=int, required=True, help="Steps in the run (S).")
@click.option("--volunteers", type=int, required=True, help="Volunteers auditing it (N).")
@click.option("--per-volunteer", type=int, required=True, help="Steps each volunteer audits (k).")
@click.option("--redundancy", type=int, default=DEFAULT_REDUNDANCY, show_default=True, help="Auditors per step (r).")
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
    from p2paudit.node.assign.plan import Scenario, closed_form, monte_carlo, per_volunteer_for

    _check_plan_size(steps, volunteers, per_volunteer, trials)
    scenario = Scenario(steps, volunteers, per_volunteer, redundancy, churn, dishonest, spill)
    exact = closed_form(scenario)
    mc = monte_carlo(scenario, trials=trials, seed=seed)
    k_target = per_volunteer_for(scenario, COVERAGE_TARGET)
    if as_json:
        click.echo(json.dumps(_plan_json(scenario, exact, mc, seed, k_target), indent=2))
    else:
        _echo_plan(scenario, exact, mc, seed, k_target)


def _plan_json(
    scenario: Scenario, exact: ClosedForm, mc: MonteCarlo, seed: int, k_target: int | None
) -> dict[str, Any]:
    """`plan --json`: the scenario, the closed form, the Monte Carlo estimate and the k for 99%."""
    s = scenario
    return {
        "scenario": {
            "steps": s.steps,
            "volunteers": s.volunteers,
            "per_volunteer": s.per_volunteer,
            "redundancy": s.redundancy,
            "effective_redundancy": s.effective_redundancy,
            "churn": s.churn,
            "dishonest": s.dishonest,
            "spill": s.spill,
        },
        "closed_form": {
            "covered_steps": exact.covered_steps(s.steps),
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
            "covered_steps": mc.covered_mean * s.steps,
            "covered_steps_stderr": None if math.isnan(mc.covered_stderr) else mc.covered_stderr * s.steps,
            "covered_fraction": mc.covered_mean,
            "caught_probability": mc.caught_mean,
            "caught_probability_stderr": None if math.isnan(mc.caught_stderr) else mc.caught_stderr,
        },
        "per_volunteer_for_99_percent": k_target,
    }


def _echo_plan(scenario: Scenario, exact: ClosedForm, mc: MonteCarlo, seed: int, k_target: int | None) -> None:
    """`plan`'s text: the scenario in one line, a table of both estimates, how they were made."""
    s, steps = scenario, scenario.steps
    method = (
        f"exact assignment of all {steps:,} steps"
        if mc.method == "exact"
        else f"{mc.steps_per_trial:,} sampled steps per trial, loads drawn"
    )
    click.echo(
        f"run of {steps:,} steps, {s.volunteers:,} volunteers x {s.per_volunteer:,} steps, "
        f"redundancy {s.effective_redundancy}, churn {s.churn:g}, dishonest {s.dishonest:g}, "
        f"{'spill-over to unchecked steps' if s.spill else 'assigned steps only'}"
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
        ("P(falsified step caught)", _pm(mc.caught_mean, mc.caught_stderr, 1.0, 4), f"{exact.caught_probability:.4f}"),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        click.echo(f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}")
    click.echo(f"monte carlo: {mc.trials} trials, seed {seed}, {method}")
    target = "unreachable (churn caps coverage)" if k_target is None else f"{k_target:,}"
    click.echo(f"per-volunteer k for {COVERAGE_TARGET:.0%} expected coverage: {target}")
