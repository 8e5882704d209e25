"""A lab run (run.lab_run) as a daemon's source: its steps replayed under the lab mode, signed as any run's.

A lab replay runs the publisher's script: a stranger's Python, with every right of the daemon's user. It
runs in a child process (audit.lab_isolation), so it cannot change the verdict this process signs, but it
runs. So `open_lab_source` refuses a lab run unless the operator opted in (`run_lab_code`, the CLI's
--run-lab-code), and refuses it before any of its code runs when `publishers` is given and the run's
signature names another key. It also refuses a run trained under another torch build (every replay of
it would be refused), read from the checked manifest (opening a run checks its script's bytes and runs
none of them).

A lab run behind a URL (a --run URL, or a followed lab's announcement) is a RemoteSource whose manifest
is a lab run's. The source refuses it without the opt-in; with it, the CLI hands the source
`open_remote_lab`, which refuses a run of another torch build once its signature and manifest are
checked, before anything else of it is fetched, and whose RemoteLab replays a step from the local view
of its checked files (run.remote_lab).

This module imports torch (through p2paudit.lab): the daemon imports it only when a lab run is given.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from pathlib import Path

from p2paudit.audit.lab_isolation import LabChildRaised
from p2paudit.audit.lab_replay import check_lab_build, check_manifest_build, lab_audits
from p2paudit.audit.records import StepAudit
from p2paudit.errors import InputError
from p2paudit.node.assign import auditor
from p2paudit.node.assign.replays import REPLAYS
from p2paudit.node.daemon.sources import no_opt_in
from p2paudit.run.lab_run import LabRunView, lab_publisher, open_lab_run
from p2paudit.run.remote import RemoteRun
from p2paudit.run.remote_lab import RemoteLabRun

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
            except LabChildRaised as exc:  # the lab's code raised in the replay's process (its log: in ours)
                raise LabReplayFailed(f"{exc}; the traceback is in the log") from None
            except InputError:
                raise
            except Exception as exc:  # ours raised: a step backed off from, never an exception that restarts
                # the audit loop on the same step, ahead of every other run's.
                logger.exception("the lab replay of step %d of %s raised", step, self.label)
                raise LabReplayFailed(
                    f"the lab replay raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]} "
                    "(the traceback is in the log)"
                ) from None
        return auditor.apply_policy(audits, policy)

    def close(self) -> None:
        pass


def _refuse_without_opt_in(where: object, run_lab_code: bool) -> None:
    if not run_lab_code:
        raise LabRunRefused(no_opt_in(where))


def open_lab_source(run_dir: Path, run_lab_code: bool, publishers: frozenset[bytes] | None) -> LabSource:
    """The lab run at `run_dir` as a source; LabRunRefused (one line) without the opt-in, from a key not
    in `publishers` (both before its script runs) or under another torch build; InputError if it does
    not check out (signature, fields, the script's SHA-256)."""
    _refuse_without_opt_in(run_dir, run_lab_code)
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


class RemoteLab:
    """A lab run behind a URL as a RemoteSource's lab part (node.daemon.sources.RemoteLab): its checked
    manifest, the local view of the checked files steps replay from (run.remote_lab), each step's replay."""

    def __init__(self, run: RemoteLabRun) -> None:
        self.run = run
        self.manifest = run.manifest

    def local_view(self, steps: range) -> AbstractContextManager[Path]:
        return self.run.local_view(steps)

    def replay(self, run_dir: Path, step: int, label: str, policy: auditor.AuditPolicy) -> tuple[StepAudit, ...]:
        """The audits of `step` from a local view of its checked files: opened and replayed as a local lab run's
        step is (its script run in the replay's child process), every failure one line (LabSource.replay)."""
        view = open_lab_run(run_dir, range(step, step + 1))  # checks the script's bytes; runs none of them
        return LabSource(view).replay(step, "", policy)


def open_remote_lab(remote: RemoteRun) -> RemoteLab:
    """The lab run `remote` serves (its signature, pinned publisher and manifest checked by RemoteRun and
    run.remote_lab), for a daemon that audits lab runs (--run-lab-code): LabRunRefused (one line) when it
    was trained under another torch build, before any other file of it is fetched."""
    lab = RemoteLabRun(remote)
    try:
        check_manifest_build(lab.manifest)
    except InputError as exc:
        raise LabRunRefused(f"{remote.base}: {exc}") from None
    return RemoteLab(lab)
