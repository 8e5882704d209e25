"""Tiny lab runs for the verify-range and daemon tests: a script over tests/lab/models.py's TinyLlama, trained
a step or two, published with the node key (its claims rewritten by `change`, to make a signed lie)."""

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


def publish_tiny(
    where: Path, identity: Identity, steps: int = 2, change: Change | None = None, values: bool = True
) -> Path:
    """Write the tiny script to `where`/lab_tiny.py, train it `steps` steps and publish `where`/run."""
    where.mkdir(parents=True, exist_ok=True)
    script_path = where / "lab_tiny.py"
    script_path.write_text(TINY_SCRIPT)
    script = load_script(script_path)
    claims, states = train_script(script, steps, values=values)
    run = where / "run"
    publish_lab_run(run, script, change(claims, states) if change else claims, states, identity)
    return run
