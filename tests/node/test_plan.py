"""`plan`: closed form against an exact sum and against Monte Carlo; the motivating scenario; the CLI."""

import json
import math
from fractions import Fraction

import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.errors import InputError
from p2paudit.node.assign.plan import Scenario, closed_form, monte_carlo, per_volunteer_for, pick_probability


def _exact_q(steps, volunteers, k, r):
    """E[min(k, 1+B)/(1+B)] by summing every term of Binomial(S-1, r/N) in rationals."""
    p = Fraction(min(r, volunteers), volunteers)
    n = steps - 1
    return float(
        sum(math.comb(n, b) * p**b * (1 - p) ** (n - b) * Fraction(min(k, 1 + b), 1 + b) for b in range(n + 1))
    )


@pytest.mark.parametrize("args", [(200, 10, 7, 2), (150, 30, 1, 1), (60, 4, 100, 3), (90, 2, 5, 9), (1, 1, 0, 1)])
def test_pick_probability_matches_the_full_sum(args):
    assert pick_probability(*args) == pytest.approx(_exact_q(*args), rel=1e-9, abs=1e-12)


def _agree(mc_mean, mc_stderr, expected):
    assert abs(mc_mean - expected) <= 4 * mc_stderr + 1e-3, (mc_mean, mc_stderr, expected)


@pytest.mark.parametrize("r,churn,dishonest", [(1, 0.0, 0.0), (2, 0.2, 0.25)])
def test_exact_monte_carlo_agrees_with_closed_form(r, churn, dishonest):
    scenario = Scenario(1200, 40, 10, r, churn, dishonest)
    mc = monte_carlo(scenario, trials=12, seed=3)
    assert mc.method == "exact" and mc.steps_per_trial == 1200
    cf = closed_form(scenario)
    _agree(mc.covered_mean, mc.covered_stderr, cf.covered_fraction)
    _agree(mc.caught_mean, mc.caught_stderr, cf.caught_probability)
    if r == 1 and churn == 0:
        # r = 1: each volunteer holds ~30 steps of its own and audits 10, so 400 of the 1,200 steps
        assert cf.covered_fraction == pytest.approx(400 / 1200, rel=1e-3)


def test_sampled_monte_carlo_agrees_with_closed_form():
    scenario = Scenario(100_000, 200, 10, 2, 0.1, 0.3)
    mc = monte_carlo(scenario, trials=10, seed=1, budget=400_000)
    assert mc.method == "sampled" and mc.steps_per_trial == 200
    cf = closed_form(scenario)
    _agree(mc.covered_mean, mc.covered_stderr, cf.covered_fraction)
    _agree(mc.caught_mean, mc.caught_stderr, cf.caught_probability)


def test_monte_carlo_is_deterministic_for_a_seed():
    scenario = Scenario(300, 20, 5, 2, 0.3, 0.3)
    assert monte_carlo(scenario, trials=3, seed=7) == monte_carlo(scenario, trials=3, seed=7)
    assert monte_carlo(scenario, trials=3, seed=7) != monte_carlo(scenario, trials=3, seed=8)
    assert math.isnan(monte_carlo(scenario, trials=1, seed=7).covered_stderr)


@pytest.mark.slow  # 3 s (fast tier: pytest -m 'not slow')
def test_motivating_scenario():
    # 100 volunteers x 10 steps: about 1,000 distinct steps of 100,000 (1%), with r = 1 or the default r = 2.
    one = closed_form(Scenario(100_000, 100, 10, 1))
    assert one.covered_steps(100_000) == pytest.approx(1000, abs=0.5)
    two = closed_form(Scenario(100_000, 100, 10))
    assert 990 < two.covered_steps(100_000) <= 1000
    # 10,000 volunteers x 10 steps with r = 1: exactly S audits' worth of capacity, but loads are
    # Poisson(10)-uneven, so the model covers 87.49%, not all; k = 16 reaches 99% and k = 30 leaves 0.001 steps uncovered.
    crowd = Scenario(100_000, 10_000, 10, 1)
    assert closed_form(crowd).covered_steps(100_000) == pytest.approx(87_489.6, abs=0.1)
    assert per_volunteer_for(crowd, 0.99) == 16
    assert closed_form(Scenario(100_000, 10_000, 30, 1)).covered_steps(100_000) > 100_000 - 1
    assert per_volunteer_for(Scenario(100, 10, 1, 2, churn=0.5), 0.99) is None  # churn caps coverage at 75%
    # With spill-over (the daemon's rule: spare capacity takes steps nobody checked) the same crowd covers
    # all of the run, by closed form and by Monte Carlo over the real assignment.
    spilled = Scenario(100_000, 10_000, 10, 1, spill=True)
    assert closed_form(spilled).covered_steps(100_000) == pytest.approx(100_000, abs=0.5)
    assert monte_carlo(spilled, trials=3, seed=0).covered_mean == 1.0
    # ... while 100 volunteers still cover about 1% of it: spill-over adds nothing when nobody has spare.
    assert closed_form(Scenario(100_000, 100, 10, 1, spill=True)).covered_steps(100_000) == pytest.approx(1000, abs=0.5)


@pytest.mark.parametrize("r,churn,dishonest,k", [(1, 0.0, 0.0, 40), (2, 0.2, 0.25, 40), (1, 0.1, 0.3, 25)])
def test_spill_over_monte_carlo_agrees_with_closed_form(r, churn, dishonest, k):
    scenario = Scenario(1200, 40, k, r, churn, dishonest, spill=True)
    mc = monte_carlo(scenario, trials=12, seed=5)
    cf = closed_form(scenario)
    assert mc.method == "exact"
    _agree(mc.covered_mean, mc.covered_stderr, cf.covered_fraction)
    _agree(mc.caught_mean, mc.caught_stderr, cf.caught_probability)
    assert cf.covered_fraction >= closed_form(Scenario(1200, 40, k, r, churn, dishonest)).covered_fraction


def test_churn_and_dishonesty_lower_the_catch_probability():
    base = closed_form(Scenario(10_000, 1000, 10, 2))
    assert base.caught_probability == pytest.approx(base.covered_fraction)
    liars = closed_form(Scenario(10_000, 1000, 10, 2, dishonest=0.5))
    assert liars.covered_fraction == pytest.approx(base.covered_fraction)
    assert liars.caught_probability < base.caught_probability
    assert closed_form(Scenario(10_000, 1000, 10, 2, dishonest=1.0)).caught_probability == 0.0
    assert closed_form(Scenario(10_000, 1000, 10, 2, churn=1.0)).covered_fraction == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"steps": 0},
        {"volunteers": 0},
        {"per_volunteer": -1},
        {"redundancy": 0},
        {"churn": -0.1},
        {"dishonest": 1.5},
        {"churn": float("nan")},
        {"steps": 2.5},
    ],
)
def test_bad_scenarios_are_refused(kwargs):
    args = {"steps": 10, "volunteers": 5, "per_volunteer": 1} | kwargs
    with pytest.raises(InputError):
        Scenario(**args)


@pytest.mark.slow  # 2.5 s (fast tier: pytest -m 'not slow')
def test_cli_prints_both_estimates():
    result = CliRunner().invoke(cli, ["plan", "--steps", "100000", "--volunteers", "100", "--per-volunteer", "10"])
    assert result.exit_code == 0, result.output
    assert "distinct steps covered" in result.output and "997.5" in result.output
    assert "P(falsified step caught)" in result.output and "sampled" in result.output
    result = CliRunner().invoke(cli, ["plan", "--steps", "500", "--volunteers", "10", "--per-volunteer", "5", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["monte_carlo"]["method"] == "exact"
    assert out["closed_form"]["covered_steps"] == pytest.approx(closed_form(Scenario(500, 10, 5)).covered_steps(500))


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--steps", "0"], "steps"),
        (["--volunteers", "-3"], "volunteers"),
        (["--churn", "1.5"], "churn"),
        (["--dishonest", "-0.5"], "dishonest"),
        (["--trials", "0"], "trials"),
        (["--seed", "-1"], "seed"),
    ],
)
def test_cli_refuses_bad_values_in_one_line(extra, message):
    args = ["plan", "--steps", "100", "--volunteers", "10", "--per-volunteer", "2"] + extra
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.output
