"""Replaying steps of a lab run (run.lab_run) under the lab mode, each from its published checkpoint.

Each step's verdict keeps the three findings apart: the torch build (refused before anything runs when
it is not the run's), the op graph (the dataflow trace; its first departing op), the state (the tensors
that differ; with value traces, the first op whose outputs differ, or that none did: the claim's fault).
"""

from __future__ import annotations

from pathlib import Path

from p2paudit.errors import InputError
from p2paudit.lab import ReplayVerdict, replay_step
from p2paudit.run.lab_run import load_lab_state, read_lab_run


def verify_lab_steps(run_dir: Path, first: int, last: int) -> tuple[bytes, list[ReplayVerdict]]:
    """(the publisher's public key, the verdicts of steps first..last), each replayed from its checkpoint."""
    script, claims, public_key = read_lab_run(run_dir)
    if not 0 <= first <= last < len(claims.states):
        raise InputError(f"steps {first}..{last} are not in the run (it has steps 0..{len(claims.states) - 1})")
    verdicts = []
    for n in range(first, last + 1):
        verdicts.append(replay_step(script, claims, load_lab_state(run_dir, claims, n), n))
    return public_key, verdicts
