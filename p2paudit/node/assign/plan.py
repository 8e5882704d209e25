"""How much of a run a crowd of volunteers covers, and how likely a falsified step is caught.

The model (one round of audits, no gossip feedback):

- A run has S steps; N volunteers, each with its own key, audit it. Each step
  is assigned to the r' = min(r, N) volunteers that rendezvous hashing ranks
  highest (`assignment.assigned_keys`), so a volunteer is assigned A ~ about
  S*r'/N steps, unevenly: under the random-oracle view of SHA-256 each step's
  r' auditors are a uniform r'-subset, so A ~ Binomial(S, r'/N).
- Each volunteer audits min(k, A) of its assigned steps, the first k in its
  pick order (`assignment.steps_for` with nothing done yet). The pick order is
  independent of the assignment, so a volunteer assigned a step audits it with
  probability min(k, A)/A.
- Each volunteer independently churns (never reports) with probability
  `churn`, and independently is dishonest (reports "match" whatever it sees)
  with probability `dishonest`.
- A step is covered if at least one non-churned volunteer reports on it. A
  falsified step, chosen without knowing who will audit, is caught if at least
  one honest, non-churned volunteer audits it. (A publisher who knows the
  volunteer keys before publishing can compute the assignment and falsify an
  unaudited step; the estimate assumes volunteers join after the run is fixed.
  Keys ground to capture a step are likewise outside the model.)

Closed form. Given that a volunteer holds a step, its other assigned steps are
B ~ Binomial(S-1, r'/N), and it audits the step with probability

    q = E[min(k, 1+B) / (1+B)] = k*E[1/(1+B)] + sum_{b<k} P(B=b) * (1 - k/(1+b)),
    E[1/(1+B)] = (1 - (1-p)^S) / (S*p),  p = r'/N.

Then P(covered) = 1 - (1 - (1-churn)*q)^r' and
P(caught) = 1 - (1 - (1-churn)*(1-dishonest)*q)^r'. This is exact for r' = 1;
for r' >= 2 it treats the loads of a step's r' volunteers as independent
(their true correlation is O(1/S)).

Monte Carlo, seeded (the same seed gives the same figures), one random run id
and N random keys per trial:

- "exact": the whole assignment is computed with the real function (S*N
  hashes), every volunteer picks its first k steps in pick order, churn and
  dishonesty are drawn, and the covered and caught steps are counted.
- "sampled", when S*N*trials exceeds HASH_BUDGET: a uniform sample of steps per
  trial is assigned with the real function over all N keys; each assigned
  volunteer's load is drawn from 1 + Binomial(S-1, p) rather than computed
  (which would need the whole S x N table), and it audits the step with
  probability min(k, load)/load. Figures are scaled to S.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from p2paudit.errors import InputError
from p2paudit.node.assign.assignment import DEFAULT_REDUNDANCY, assigned_keys, pick_value

HASH_BUDGET = 1_500_000  # SHA-256 evaluations one Monte Carlo may spend: about 1 s with hashlib on one core


@dataclass(frozen=True)
class Scenario:
    """S steps, N volunteers auditing k steps each with redundancy r; churn and dishonest fractions."""

    steps: int
    volunteers: int
    per_volunteer: int
    redundancy: int = DEFAULT_REDUNDANCY
    churn: float = 0.0
    dishonest: float = 0.0
    spill: bool = False  # volunteers with spare capacity take unchecked steps, as the daemon does

    def __post_init__(self) -> None:
        for name, low in (("steps", 1), ("volunteers", 1), ("per_volunteer", 0), ("redundancy", 1)):
            value = getattr(self, name)
            if type(value) is not int or value < low:
                raise InputError(f"{name} must be an integer >= {low}, got {value!r}")
        for name in ("churn", "dishonest"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
                raise InputError(f"{name} must be a fraction in [0, 1], got {value!r}")
        if type(self.spill) is not bool:
            raise InputError(f"spill must be a bool, got {self.spill!r}")

    @property
    def effective_redundancy(self) -> int:
        return min(self.redundancy, self.volunteers)


@dataclass(frozen=True)
class ClosedForm:
    """Expected figures from the formulas in the module docstring."""

    pick_probability: float  # q: P(a volunteer audits a given step it is assigned)
    covered_fraction: float
    caught_probability: float
    expected_audits: float  # reports sent by all volunteers, churned ones included

    def covered_steps(self, steps: int) -> float:
        return self.covered_fraction * steps


@dataclass(frozen=True)
class MonteCarlo:
    """Mean and standard error over trials of the covered fraction and of P(caught)."""

    method: str  # "exact" or "sampled"
    trials: int
    steps_per_trial: int
    covered_mean: float
    covered_stderr: float  # nan with one trial
    caught_mean: float
    caught_stderr: float


def _binomial_pmf(n: int, b: int, p: float) -> float:
    if p >= 1.0:
        return 1.0 if b == n else 0.0
    log = math.lgamma(n + 1) - math.lgamma(b + 1) - math.lgamma(n - b + 1) + b * math.log(p) + (n - b) * math.log1p(-p)
    return math.exp(log)


def pick_probability(steps: int, volunteers: int, per_volunteer: int, redundancy: int) -> float:
    """q = E[min(k, 1+B)/(1+B)], B ~ Binomial(S-1, r'/N): P(an assigned volunteer audits the step)."""
    p = min(redundancy, volunteers) / volunteers
    k = per_volunteer
    if p >= 1.0:
        return min(k, steps) / steps
    mean_inverse = -math.expm1(steps * math.log1p(-p)) / (steps * p)
    tail = sum(_binomial_pmf(steps - 1, b, p) * (1.0 - k / (1 + b)) for b in range(min(k, steps)))
    return min(1.0, max(0.0, k * mean_inverse + tail))


def spare_capacity(steps: int, volunteers: int, per_volunteer: int, redundancy: int) -> float:
    """E[max(0, k - A)], A ~ Binomial(S, r'/N): audits one volunteer has left after its assigned steps."""
    p = min(redundancy, volunteers) / volunteers
    k = per_volunteer
    return sum(_binomial_pmf(steps, a, p) * (k - a) for a in range(min(k, steps + 1)))


def spill_fraction(s: Scenario, unchecked_fraction: float, spare_per_volunteer: float) -> float:
    """The fraction of steps left unchecked by the assigned round that spare capacity reaches."""
    if not s.spill or unchecked_fraction <= 0.0:
        return 0.0
    spare = s.volunteers * (1.0 - s.churn) * spare_per_volunteer
    return min(1.0, spare / (s.steps * unchecked_fraction))


def closed_form(scenario: Scenario) -> ClosedForm:
    """The expected covered fraction and P(caught) under the model in the module docstring."""
    s, r = scenario, scenario.effective_redundancy
    q = pick_probability(s.steps, s.volunteers, s.per_volunteer, s.redundancy)
    active = 1.0 - s.churn
    honest = active * (1.0 - s.dishonest)
    unchecked = (1.0 - active * q) ** r
    f = spill_fraction(s, unchecked, spare_capacity(s.steps, s.volunteers, s.per_volunteer, s.redundancy))
    return ClosedForm(
        pick_probability=q,
        covered_fraction=1.0 - unchecked + unchecked * f,
        caught_probability=1.0 - (1.0 - honest * q) ** r + unchecked * f * (1.0 - s.dishonest),
        expected_audits=s.steps * r * q + s.steps * unchecked * f,
    )


def per_volunteer_for(scenario: Scenario, target: float) -> int | None:
    """The smallest k whose expected covered fraction reaches `target` (closed form), None if none does."""
    if not 0.0 <= target <= 1.0:
        raise InputError(f"target coverage must be in [0, 1], got {target!r}")

    def reaches(k: int) -> bool:
        trial = Scenario(
            scenario.steps, scenario.volunteers, k, scenario.redundancy, scenario.churn, spill=scenario.spill
        )
        return closed_form(trial).covered_fraction >= target

    low, high = 0, scenario.steps
    if not reaches(high):
        return None
    while low < high:  # the covered fraction grows with k
        mid = (low + high) // 2
        low, high = (low, mid) if reaches(mid) else (mid + 1, high)
    return low


def _stats(values: list[float]) -> tuple[float, float]:
    mean = float(np.mean(values))
    stderr = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
    return mean, stderr


def _exact_trial(s: Scenario, rng: np.random.Generator) -> tuple[float, float]:
    run_id = rng.bytes(32)
    keys = [rng.bytes(32) for _ in range(s.volunteers)]
    index = {key: i for i, key in enumerate(keys)}
    assigned: list[list[int]] = [[] for _ in keys]
    for step in range(s.steps):
        for key in assigned_keys(run_id, step, keys, s.redundancy):
            assigned[index[key]].append(step)
    active = rng.random(s.volunteers) >= s.churn
    honest = active & (rng.random(s.volunteers) >= s.dishonest)
    covered = np.zeros(s.steps, dtype=bool)
    caught = np.zeros(s.steps, dtype=bool)
    spare = np.zeros(s.volunteers, dtype=np.int64)
    for v, steps in enumerate(assigned):
        picked = sorted(steps, key=lambda step: (pick_value(run_id, step, keys[v]), step))[: s.per_volunteer]
        covered[picked] |= active[v]
        caught[picked] |= honest[v]
        spare[v] = (s.per_volunteer - len(picked)) if active[v] else 0
    if s.spill:  # spare audits go to the steps nobody active checked, one volunteer per step
        unchecked = rng.permutation(np.flatnonzero(~covered))
        takers = np.repeat(np.arange(s.volunteers), spare)[: len(unchecked)]
        unchecked = unchecked[: len(takers)]
        covered[unchecked] = True
        caught[unchecked] = honest[takers]
    return float(covered.mean()), float(caught.mean())


def _sampled_trial(s: Scenario, rng: np.random.Generator, sample: int) -> tuple[float, float]:
    run_id = rng.bytes(32)
    keys = [rng.bytes(32) for _ in range(s.volunteers)]
    p = s.effective_redundancy / s.volunteers
    state: dict[bytes, tuple[int, bool, bool]] = {}  # key -> (load, active, honest), one draw per volunteer
    covered = caught = 0
    unchecked: list[bool] = []  # per sampled step nobody active checked: whether a spiller would be honest
    for step in rng.choice(s.steps, size=sample, replace=False):
        audited = honest_audit = False
        for key in assigned_keys(run_id, int(step), keys, s.redundancy):
            if key not in state:
                load = 1 + int(rng.binomial(s.steps - 1, p))
                is_active = bool(rng.random() >= s.churn)
                state[key] = (load, is_active, is_active and bool(rng.random() >= s.dishonest))
            load, is_active, is_honest = state[key]
            if rng.random() < min(s.per_volunteer, load) / load:
                audited |= is_active
                honest_audit |= is_honest
        if s.spill and not audited:
            unchecked.append(bool(rng.random() >= s.dishonest))  # the spiller, if one comes, is honest?
        covered += audited
        caught += honest_audit
    if unchecked:
        spare = float(np.maximum(0, s.per_volunteer - rng.binomial(s.steps, p, size=s.volunteers)).mean())
        f = spill_fraction(s, len(unchecked) / sample, spare)
        for spiller_honest in unchecked:
            if rng.random() < f:
                covered += 1
                caught += spiller_honest
    return covered / sample, caught / sample


def monte_carlo(scenario: Scenario, trials: int = 10, seed: int = 0, budget: int = HASH_BUDGET) -> MonteCarlo:
    """Covered fraction and P(caught) over `trials` seeded trials of the real assignment function."""
    if type(trials) is not int or trials < 1:
        raise InputError(f"trials must be an integer >= 1, got {trials!r}")
    if type(seed) is not int or seed < 0:
        raise InputError(f"seed must be an integer >= 0, got {seed!r}")
    s = scenario
    rng = np.random.default_rng(seed)
    if s.steps * s.volunteers * trials <= budget:
        method, per_trial = "exact", s.steps
        results = [_exact_trial(s, rng) for _ in range(trials)]
    else:
        method, per_trial = "sampled", max(1, min(s.steps, budget // (s.volunteers * trials)))
        results = [_sampled_trial(s, rng, per_trial) for _ in range(trials)]
    covered_mean, covered_stderr = _stats([c for c, _ in results])
    caught_mean, caught_stderr = _stats([c for _, c in results])
    return MonteCarlo(method, trials, per_trial, covered_mean, covered_stderr, caught_mean, caught_stderr)
