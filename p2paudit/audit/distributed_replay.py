"""Replay a range of steps with each step's micro-batches spread over W processes.

The replay logic is audit.replay.verify_range (audit.range_driver's loop over
an in-memory runner whose step is this rank's share), unchanged: every rank runs it
in lock-step, as every rank of `train --world-size W` runs the publisher's
loop (run.workers). Each rank opens and checks the run itself, loads the same
checkpoints and takes the same decisions (re-anchoring, errors), and each
step goes through engine.distributed.distributed_train_step, whose result is
the one-process result bit for bit on every rank. Rank 0 reports: its audits
and diagnoses are the verdict; the other ranks only step (they neither report
nor diagnose).

Two ways to form the group:

- `world_size` N: N processes spawned on this machine, joined over loopback
  (engine.distributed.spawn_workers); rank 0's audits come back to the caller.
- torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and
  LOCAL_RANK): this process is one rank of a group that may span machines; it
  joins with init_method="env://" over gloo.

Before any step, the ranks exchange (with all_gather, a byte copy) whether
they could open the run and a digest of what they are about to replay (run
id, steps, backend, world size): a rank that cannot, or would replay anything
else, stops every rank with one line instead of mixing two runs' gradients
into a false mismatch.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.queues import SimpleQueue
from pathlib import Path

import numpy as np
import torch.distributed as dist
import torch.multiprocessing as mp

from p2paudit.audit.records import StepAudit
from p2paudit.audit.replay import RangeReport, RunView, StepRange, check_publisher, parse_step_range, verify_range
from p2paudit.audit.streamed_replay import verify_range_planned
from p2paudit.engine.backends import load_backend
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.distributed import (
    GROUP_TIMEOUT,
    all_gather_buffers,
    distributed_train_step,
    rank_share,
    spawn_workers,
)
from p2paudit.engine.progress import ProgressHook, StepProgress
from p2paudit.engine.step import StepResult
from p2paudit.errors import InputError, InternalError, P2PAuditError

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
MAX_WORLD_SIZE = 2**16
_OK, _FAILED = 0.0, 1.0


@dataclass(frozen=True)
class ReplayTask:
    """What every rank replays; picklable, so spawned ranks receive it as it is.

    `open_view` opens and checks the run (e.g. functools.partial(open_run, run_dir));
    each rank calls it itself.
    """

    open_view: Callable[[], RunView]
    steps: str
    backend: str
    against: str | None = None
    publisher: str | None = None
    mode: str = "auto"  # engine.memory.REPLAY_MODES; a streaming replay runs on one process
    scratch_dir: Path | None = None  # where a streaming replay keeps its files (needed when it streams)


@dataclass(frozen=True)
class TorchrunEnv:
    """The process group torchrun describes in the environment."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    local_rank: int


def check_world_size(cfg: TrainConfig, world_size: int) -> None:
    """InputError unless world_size is a power of two <= the run's micro_batches."""
    rank_share(cfg, 0, world_size)


def prepare(task: ReplayTask, world_size: int) -> tuple[RunView, StepRange]:
    """Open and check the run, its publisher, the step range and the world size (InputError on any fault)."""
    view = task.open_view()
    if task.publisher is not None:
        check_publisher(view, task.publisher)
    steps = parse_step_range(task.steps, view.manifest.num_steps)
    check_world_size(view.cfg, world_size)
    if task.mode == "streaming" and world_size > 1:
        raise InputError(f"a streaming replay runs on one process, not {world_size}; drop --replay streaming")
    load_backend(task.backend, view.manifest.arithmetic)
    return view, steps


def distributed_step_factory(
    rank: int, world_size: int
) -> Callable[[TrainConfig, str, int], Callable[..., StepResult]]:
    """verify_range's step_factory for one rank: its step is that rank's share of the distributed step."""

    def factory(cfg: TrainConfig, backend_name: str, arithmetic: int) -> Callable[..., StepResult]:
        backend = load_backend(backend_name, arithmetic)

        def step(
            state: dict[str, np.ndarray], batch: np.ndarray, *, progress: ProgressHook | None = None
        ) -> StepResult:
            return distributed_train_step(state, batch, cfg, backend, rank, world_size, progress=progress)

        return step

    return factory


def _intent_digest(view: RunView, steps: StepRange, task: ReplayTask, world_size: int) -> bytes:
    what = repr((steps.init, steps.first, steps.last, task.backend, world_size)).encode()
    return hashlib.sha256(view.manifest.run_id + what).digest()


def _agree(prepared: tuple[RunView, StepRange] | None, task: ReplayTask, rank: int, world_size: int) -> None:
    """Every rank learns whether every other could open the run and replays the same thing; InputError if not."""
    if prepared is None:
        mine = np.zeros(9, dtype=np.float32)
        mine[0] = _FAILED
    else:
        digest = np.frombuffer(_intent_digest(*prepared, task, world_size), dtype=np.float32)
        mine = np.concatenate([np.array([_OK], dtype=np.float32), digest])
    gathered = all_gather_buffers(mine, world_size)
    failed = [r for r, b in enumerate(gathered) if b[0] != _OK]
    if failed:
        raise InputError(f"rank(s) {failed} of {world_size} could not open the run or its step range; see their errors")
    differ = [r for r, b in enumerate(gathered) if b.tobytes() != mine.tobytes()]
    if differ:
        raise InputError(
            f"rank(s) {differ} of {world_size} would replay another run, step range or backend than rank {rank}"
        )


def replay_as_rank(
    task: ReplayTask,
    rank: int,
    world_size: int,
    on_audit: Callable[[StepAudit], None] | None,
    expected_run_id: bytes | None = None,
    *,
    progress: ProgressHook | None = None,
) -> tuple[RunView, RangeReport]:
    """One rank's replay inside an initialised group of `world_size`; rank 0's report is the verdict.

    Only rank 0 reports audits (`on_audit`), progress (its share of each step's
    micro-batches, then the update) and diagnoses a mismatch.
    """
    prepared, error = None, None
    try:
        prepared = prepare(task, world_size)
        if expected_run_id is not None and prepared[0].manifest.run_id != expected_run_id:
            raise InputError("the run's manifest changed while the replay started: its run id is not the one checked")
    except P2PAuditError as exc:
        error = exc
    _agree(prepared, task, rank, world_size)
    if error is not None or prepared is None:
        raise error or InternalError("a rank agreed without a prepared run")
    view, steps = prepared
    report = verify_range(
        view,
        steps,
        task.backend,
        on_audit=on_audit if rank == 0 else None,
        diagnose=rank == 0,
        against=task.against,
        step_factory=distributed_step_factory(rank, world_size),
        progress=progress if rank == 0 else None,
    )
    return view, report


def replay_one_process(
    view: RunView,
    steps: StepRange,
    task: ReplayTask,
    on_audit: Callable[[StepAudit], None] | None,
    *,
    progress: ProgressHook | None = None,
) -> RangeReport:
    """The replay on this process: in memory, or streamed when task.mode asks or the in-memory one does not fit."""
    if task.scratch_dir is None and task.mode != "in-memory":
        raise InternalError("a replay that may stream was started without a scratch directory")
    scratch = task.scratch_dir if task.scratch_dir is not None else Path(".")
    return verify_range_planned(
        view, steps, task.backend, task.mode, scratch, on_audit, against=task.against, progress=progress
    )


Reports = SimpleQueue[StepAudit | StepProgress]  # rank 0's audits and progress events, as they come


def _spawned_rank(
    rank: int, world_size: int, task: ReplayTask, run_id: bytes, reports: Reports, watched: bool
) -> RangeReport | P2PAuditError | None:
    """Body of one spawned rank: rank 0 returns its RangeReport, others None; a failure is returned, not raised,
    so the caller can name the rank whose input failed rather than the peer that lost it. Rank 0 puts its
    audits (and, when `watched`, its progress events) on the `reports` queue as they come."""
    try:
        on_audit = reports.put if rank == 0 else None
        progress = reports.put if rank == 0 and watched else None
        _, report = replay_as_rank(task, rank, world_size, on_audit, run_id, progress=progress)
        return report if rank == 0 else None
    except P2PAuditError as exc:
        return exc
    except Exception as exc:  # handed to the caller as the verifier's own failure
        return InternalError(f"rank {rank}: {type(exc).__name__}: {exc}; {traceback.format_exc(limit=3)}")


def verify_range_spawned(
    task: ReplayTask,
    world_size: int,
    on_audit: Callable[[StepAudit], None] | None = None,
    *,
    progress: ProgressHook | None = None,
) -> tuple[RunView, RangeReport]:
    """Replay task's steps on `world_size` processes of this machine (loopback); the audits equal one process's.

    Everything is checked here first (InputError before any process starts);
    world size 1, or a range with no step, runs in this process. `progress` gets
    rank 0's events (its share of each step's micro-batches, then the update).
    """
    view, steps = prepare(task, world_size)
    if world_size == 1 or steps.first is None:
        return view, replay_one_process(view, steps, task, on_audit, progress=progress)
    reports: Reports = mp.get_context("spawn").SimpleQueue()
    results: list[object] = []  # what each rank returned, in rank order (pickled across: checked below)
    failed: list[BaseException] = []
    watched = progress is not None

    def run() -> None:
        try:
            run_id = view.manifest.run_id
            results.extend(spawn_workers(world_size, _spawned_rank, task, run_id, reports, watched))
        except BaseException as exc:  # re-raised in the calling thread below
            failed.append(exc)

    thread = threading.Thread(target=run, name="p2paudit-replay-ranks", daemon=True)
    thread.start()
    while thread.is_alive() or not reports.empty():
        _drain(reports, on_audit, progress)
        thread.join(timeout=0.1)
    _drain(reports, on_audit, progress)
    if failed:
        raise failed[0]
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:  # the rank whose input failed (exit 2) rather than a peer that only lost it
        raise next((e for e in errors if isinstance(e, InputError)), errors[0])
    report = results[0]
    if not isinstance(report, RangeReport):
        raise InternalError(f"rank 0 returned {type(report).__name__}, not a RangeReport")
    return view, report


def _drain(
    reports: Reports, on_audit: Callable[[StepAudit], None] | None, progress: ProgressHook | None = None
) -> None:
    while not reports.empty():
        report = reports.get()
        if isinstance(report, StepProgress):
            if progress is not None:
                progress(report)
        elif on_audit is not None:
            on_audit(report)


def _env_int(env: Mapping[str, str], name: str, low: int, high: int) -> int:
    text = env.get(name, "")
    if not (text.isascii() and text.isdigit() and len(text) <= 9) or not low <= int(text) <= high:
        raise InputError(f"environment variable {name}={text[:40]!r} is not an integer in [{low}, {high}]")
    return int(text)


def torchrun_env(env: Mapping[str, str]) -> TorchrunEnv:
    """The group torchrun (or a user) set in `env`; InputError naming the first variable missing or malformed."""
    missing = [name for name in TORCHRUN_VARIABLES if not env.get(name)]
    if missing:
        raise InputError(
            f"--world-size from-env needs torchrun's environment: {', '.join(missing)} not set "
            "(start it with torchrun, or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)"
        )
    world_size = _env_int(env, "WORLD_SIZE", 1, MAX_WORLD_SIZE)
    rank = _env_int(env, "RANK", 0, world_size - 1)
    port = _env_int(env, "MASTER_PORT", 1, 65535)
    local_rank = _env_int(env, "LOCAL_RANK", 0, MAX_WORLD_SIZE) if env.get("LOCAL_RANK") else 0
    addr = env["MASTER_ADDR"]
    if len(addr) > 253 or not addr.isascii() or any(c.isspace() for c in addr):
        raise InputError(f"environment variable MASTER_ADDR={addr[:40]!r} is not a host name or address")
    return TorchrunEnv(rank, world_size, addr, port, local_rank)


def _is_loopback(addr: str) -> bool:
    if addr == "localhost":
        return True
    try:
        return ipaddress.ip_address(addr).is_loopback
    except ValueError:
        return False


def verify_range_from_env(
    task: ReplayTask,
    on_audit: Callable[[StepAudit], None] | None = None,
    *,
    progress: ProgressHook | None = None,
) -> tuple[int, RunView, RangeReport]:
    """Join torchrun's group (init_method="env://", gloo) as one rank and replay; returns (rank, view, report).

    The variables are checked first (InputError naming the bad one). Only rank
    0's report is the verdict: the others neither report nor diagnose. Gloo
    carries the partial sums between hosts whatever the kernel backend (the
    collective only copies bytes); set GLOO_SOCKET_IFNAME to the interface that
    reaches the other hosts. The group is left on return.
    """
    where = torchrun_env(os.environ)
    if _is_loopback(where.master_addr):  # one machine: keep gloo off the hostname's interface
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(backend="gloo", init_method="env://", timeout=GROUP_TIMEOUT)
    try:
        view, report = replay_as_rank(task, where.rank, where.world_size, on_audit, progress=progress)
    finally:
        dist.destroy_process_group()
    return where.rank, view, report
