"""A lab run (run.lab_run) as a daemon's source: its steps replayed under the lab mode, signed as any run's.

A lab replay runs the publisher's script in this process: a stranger's Python, with every right the
daemon has. So `open_lab_source` refuses a lab run unless the operator opted in (`run_lab_code`, the
CLI's --run-lab-code), and refuses it before any of its code runs when `publishers` is given and the
run's signature names another key. It also refuses a run trained under another torch build (every
replay of it would be refused), after the script is loaded (the build is read from the checked
manifest, which open_lab_run parses with the script).

This module imports torch (through p2paudit.lab): the daemon imports it only when a lab run is given.
Local run directories only: a lab run behind a URL is not fetched.
"""

from __future__ import annotations

import logging
from pathlib import Path

from p2paudit.audit.lab_replay import check_lab_build, lab_audits
from p2paudit.audit.records import StepAudit
from p2paudit.errors import InputError
from p2paudit.node.assign import auditor
from p2paudit.node.assign.replays import REPLAYS
from p2paudit.run.lab_run import LabRunView, lab_publisher, open_lab_run

RUN_LAB_CODE_FLAG = "--run-lab-code"

logger = logging.getLogger(__name__)


class LabRunRefused(InputError):
    """A lab run the daemon will not audit: no opt-in, another publisher, another torch build (exit 2)."""


class LabReplayFailed(InputError):
    """A lab step's replay raised: the publisher's script, or the lab mode under it. Nothing is signed; the
    daemon backs off from the step (30 s, doubling) and audits other steps and runs meanwhile."""


class LabSource:
    """An opened local lab run: its checked claims (`manifest`: the LabRunView) and each step's lab replay."""

    def __init__(self, view: LabRunView) -> None:
        self.view = view
        self.manifest = view
        self.label = view.label

    def replay(self, step: int, backend: str, policy: auditor.AuditPolicy) -> tuple[StepAudit, ...]:
        """The audits of `step` (state 0's first with step 0), replayed on the backend the run's manifest
        names (`backend`, the daemon's engine backend, does not apply: a lab step has one canonical backend)."""
        with REPLAYS.watching(self.view.run_id, step):  # the status's busy step
            try:
                audits = lab_audits(self.view, step == 0, range(step, step + 1))
            except InputError:
                raise
            except Exception as exc:  # the lab's code raised (or ours under it): a step backed off from, never
                # an exception that restarts the audit loop on the same step, ahead of every other run's.
                logger.exception("the lab replay of step %d of %s raised", step, self.label)
                raise LabReplayFailed(
                    f"the lab replay raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]} "
                    "(the publisher's script or the lab mode; the traceback is in the log)"
                ) from None
        return auditor.apply_policy(audits, policy)

    def close(self) -> None:
        pass


def open_lab_source(run_dir: Path, run_lab_code: bool, publishers: frozenset[bytes] | None) -> LabSource:
    """The lab run at `run_dir` as a source; LabRunRefused (one line) without the opt-in, from a key not
    in `publishers` (both before its script runs) or under another torch build; InputError if it does
    not check out (signature, fields, the script's SHA-256)."""
    if not run_lab_code:
        raise LabRunRefused(
            f"{run_dir} is a lab run: auditing it runs its publisher's script in this process; "
            f"pass {RUN_LAB_CODE_FLAG} to allow it (for publishers you would let run code here)"
        )
    if publishers is not None:
        key = lab_publisher(run_dir)  # the key the signature file names; open_lab_run verifies it
        if key not in publishers:
            raise LabRunRefused(f"{run_dir}: signed by {key.hex()}, not by a --publisher key (its script not run)")
    view = open_lab_run(run_dir)
    try:
        check_lab_build(view)
    except InputError as exc:
        raise LabRunRefused(f"{run_dir}: {exc}") from None
    return LabSource(view)
