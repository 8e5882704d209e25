"""Tiny lab runs for the verify-range and daemon tests: a script over tests/lab/models.py's TinyLlama, trained
a step or two, published with the node key (its claims rewritten by `change`, to make a signed lie); and
the examples' scripts (examples/lab_*.py) trained and published the same way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from p2paudit.identity import Identity
from p2paudit.lab import LabClaims, load_script, train_script
from p2paudit.run.lab_run import publish_lab_run

TINY_SCRIPT = '''\
"""A lab script for the tests: tests/lab/models.py's TinyLlama on numpy-drawn tokens."""

from tests.lab.models import batches, make, train_step  # noqa: F401 (train_step is the interface)


def build():
    return make(seed=0)


def batch(step):
    return batches(step + 1)[step]
'''

Change = Callable[[LabClaims, list[dict[str, np.ndarray]]], LabClaims]


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def publish_tiny(
    where: Path,
    identity: Identity,
    steps: int = 2,
    change: Change | None = None,
    values: bool = True,
    extra_source: str = "",
) -> Path:
    """Write the tiny script (and `extra_source` after it) to `where`/lab_tiny.py, train it `steps` steps
    and publish `where`/run."""
    where.mkdir(parents=True, exist_ok=True)
    script_path = where / "lab_tiny.py"
    script_path.write_text(TINY_SCRIPT + extra_source)
    script = load_script(script_path)
    claims, states, batches = train_script(script, steps, values=values)
    run = where / "run"
    publish_lab_run(run, script, change(claims, states) if change else claims, states, batches, identity)
    return run


def publish_example(
    name: str, runs: dict[str, Path], identity: Identity, steps: int = 2, changes: dict[str, Change] | None = None
) -> None:
    """Train examples/`name` once, `steps` steps with value traces, and publish it to each of `runs`
    (label -> directory), the claims and states of those in `changes` rewritten (to make signed lies)."""
    script = load_script(EXAMPLES / name)
    claims, states, batches = train_script(script, steps, values=True)
    for label, run in runs.items():
        mine = [{k: v.copy() for k, v in state.items()} for state in states]
        change = (changes or {}).get(label)
        publish_lab_run(run, script, change(claims, mine) if change else claims, mine, batches, identity)
