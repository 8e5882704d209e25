"""The publisher: train a run into a directory, resumably, and sign its manifest.

While training, `progress.json` holds the manifest body so far (canonical
JSON, unsigned), rewritten atomically right after each checkpoint: the steps
it lists are exactly those up to its last checkpoint. A killed publisher
resumes from that checkpoint; since a step is a pure function of (state,
batch), the finished run is bit-identical to an uninterrupted one. When the
last step is done, the manifest is signed and written and progress.json is
removed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from p2paudit import __version__
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.step import StepResult
from p2paudit.errors import InputError
from p2paudit.identity import (CONFIG_FILE_NAME, Identity, default_config, default_key_path, generate_identity,
                               home_dir, load_config, load_identity, save_config, save_identity)
from p2paudit.run.checkpoint import load_checkpoint, save_checkpoint
from p2paudit.run.digest import StateDigest, digest_batch, digest_bytes, digest_state, format_digest
from p2paudit.run.manifest import (MANIFEST_FILE, RUN_FORMAT, RUN_VERSION, SIGNATURE_FILE, StepRecord,
                                   canonical_json, read_manifest, write_manifest)
from p2paudit.run.shards import DataSpec, corpus_tokens, load_tokens, write_shards
from p2paudit.run.storage import lock_directory, read_file, remove_temp_files, write_atomic
from p2paudit.run.traces import TraceRecorder, encode_trace, trace_path

PROGRESS_FILE = "progress.json"
SCHEDULE_NAME = "p2paudit.engine.schedule.batch_for_step/v1"
# What a run directory may hold; anything else means it is not ours to write into.
RUN_ENTRIES = {"shards", "checkpoints", "traces", PROGRESS_FILE, MANIFEST_FILE, SIGNATURE_FILE}


@dataclass(frozen=True)
class TrainPlan:
    """What to train: config name and geometry, number of steps, checkpoint spacing, how to compute."""

    run_dir: Path
    config: str = "tiny"
    steps: int = 8
    micro_batches: int | None = None
    seed: int = 0
    ckpt_every: int = 1
    world_size: int = 1
    backend: str = "cpu"
    traces: bool = False  # also publish every step's operation trace (one process only)


@dataclass(frozen=True)
class StepDone:
    """Progress report for one finished step (handed to the caller's callback)."""

    step: int
    steps: int
    loss: float
    resumed_from: int  # the state index this session started from


@dataclass(frozen=True)
class PublishResult:
    """The finished run: id, directory, number of steps, and whether it was already complete."""

    run_id: bytes
    run_dir: Path
    steps: int
    already_complete: bool
    resumed_from: int


def load_publisher_key(path: Path | None) -> Identity:
    """The key at `path`; else the node's key (as its config.json names it, or home_dir()/node.key).

    A node without a key is set up as `p2paudit init` would (key and config),
    so that `p2paudit id` and the node commands use the same key afterwards.
    """
    if path is not None:
        return load_identity(path)
    config_path = home_dir() / CONFIG_FILE_NAME
    if config_path.exists():
        return load_identity(load_config(config_path).key)
    key_path = default_key_path()
    if not key_path.exists():
        save_identity(generate_identity(), key_path)
        save_config(default_config(), config_path)
    return load_identity(key_path)


def check_plan(plan: TrainPlan) -> TrainConfig:
    """The plan's TrainConfig; InputError for a plan that cannot run (numbers out of range, a world
    size the micro-batches cannot be split over, a directory that is not a run's)."""
    from p2paudit.engine.config import train_config

    if plan.steps < 1:
        raise InputError(f"--steps is {plan.steps}, want >= 1")
    if plan.ckpt_every < 1:
        raise InputError(f"--ckpt-every is {plan.ckpt_every}, want >= 1")
    if plan.world_size < 1:
        raise InputError(f"--world-size is {plan.world_size}, want >= 1")
    if plan.traces and plan.world_size != 1:
        raise InputError(f"--traces needs --world-size 1, got {plan.world_size}")
    cfg = train_config(plan.config, micro_batches=plan.micro_batches, seed=plan.seed, steps=plan.steps)
    load_backend(plan.backend)
    if plan.world_size > 1:
        from p2paudit.engine.distributed import rank_share

        rank_share(cfg, 0, plan.world_size)
    _check_directory(plan.run_dir)
    return cfg


def new_body(cfg: TrainConfig, data: DataSpec, initial: StateDigest, plan: TrainPlan) -> dict:
    """The manifest body before any step: everything but the step records."""
    import kernels
    from p2paudit import engine

    return {
        "format": RUN_FORMAT, "version": RUN_VERSION, "arithmetic_version": kernels.ARITHMETIC_VERSION,
        "engine_version": engine.ENGINE_VERSION, "created_by": f"p2paudit {__version__}",
        "config": cfg.to_dict(), "steps_planned": plan.steps, "checkpoint_every": plan.ckpt_every,
        "data": data.to_dict(),
        "schedule": {"function": SCHEDULE_NAME, "data_key": format_digest(data.data_key), "seed": cfg.seed,
                     "micro_batches": cfg.micro_batches, "batch_size": cfg.batch_size,
                     "seq_len": cfg.model.seq_len},
        "initial_state": initial.to_dict(), "steps": [], "loss_curve": [], "checkpoints": [0],
        "traces": plan.traces,
    }


def _same_plan(body: dict, cfg: TrainConfig, plan: TrainPlan) -> bool:
    return (body.get("config") == json.loads(canonical_json(cfg.to_dict()))
            and body.get("steps_planned") == plan.steps and body.get("checkpoint_every") == plan.ckpt_every
            and body.get("traces", False) == plan.traces)


def _check_directory(run_dir: Path) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(f"run directory {run_dir} is a file")
    strangers = sorted(p.name for p in run_dir.iterdir() if p.name not in RUN_ENTRIES and not p.name.endswith(".tmp")) \
        if run_dir.is_dir() else []
    if strangers:
        raise InputError(f"run directory {run_dir} holds {strangers[0]} (and {len(strangers) - 1} more), "
                         f"not a p2paudit run; choose an empty or new directory")


def publish_run(plan: TrainPlan, identity: Identity, on_step: Callable[[StepDone], None] | None = None) -> PublishResult:
    """Train `plan` into plan.run_dir (resuming if interrupted), sign and write the manifest.

    Returns at once if the directory already holds the finished run of this
    plan; raises InputError if it holds a different run.
    """
    cfg = check_plan(plan)
    run_dir = plan.run_dir
    if (run_dir / MANIFEST_FILE).exists() and not (run_dir / PROGRESS_FILE).exists():
        manifest = read_manifest(run_dir)
        if not _same_plan(manifest.body, cfg, plan):
            raise InputError(f"run directory {run_dir} already holds a finished run with another config, "
                             f"--steps or --ckpt-every")
        return PublishResult(manifest.run_id, run_dir, manifest.num_steps, True, manifest.num_steps)
    run_dir.mkdir(parents=True, exist_ok=True)
    with lock_directory(run_dir):
        remove_temp_files(run_dir)
        body, tokens, state = _start_or_resume(run_dir, cfg, plan)
        resumed_from = len(body["steps"])
        if plan.world_size > 1:
            from p2paudit.run.workers import train_distributed

            train_distributed(run_dir, body, tokens, state, cfg, plan, on_step)
        else:
            train_steps(run_dir, body, tokens, state, cfg, plan, single_process_step(cfg, plan.backend), on_step)
        run_id = write_manifest(run_dir, body, identity)
        (run_dir / PROGRESS_FILE).unlink(missing_ok=True)
    return PublishResult(run_id, run_dir, plan.steps, False, resumed_from)


def _start_or_resume(run_dir: Path, cfg: TrainConfig, plan: TrainPlan) -> tuple[dict, np.ndarray, dict]:
    """(body so far, corpus tokens, state at the last checkpoint), writing shards and state 0 if new."""
    from p2paudit.engine.state import init_state, state_names

    progress = run_dir / PROGRESS_FILE
    if progress.exists():
        body, data, claimed = _read_progress(progress, cfg, plan)
        tokens = load_tokens(run_dir, data)
        state = load_checkpoint(run_dir, len(body["steps"]), claimed, state_names(cfg))
        return body, tokens, state
    data = write_shards(run_dir, corpus_tokens())
    tokens = load_tokens(run_dir, data)
    state = init_state(cfg)
    initial = digest_state(state)
    save_checkpoint(run_dir, 0, state, initial)
    body = new_body(cfg, data, initial, plan)
    write_atomic(progress, canonical_json(body))
    return body, tokens, state


def _read_progress(progress: Path, cfg: TrainConfig, plan: TrainPlan) -> tuple[dict, DataSpec, StateDigest]:
    """(body so far, its data spec, claimed digest of its last checkpointed state) from progress.json."""
    try:
        body = json.loads(read_file(progress, "progress file").decode("utf-8"))
        if not isinstance(body, dict) or not _same_plan(body, cfg, plan):
            raise InputError(f"{progress} belongs to a run with another config, --steps or --ckpt-every; "
                             f"resume it with the same flags or use another directory")
        data = DataSpec.from_dict(body["data"])
        done = len(body["steps"])
        claimed = StateDigest.from_dict(body["initial_state"], str(progress)) if done == 0 else \
            StepRecord.from_dict(body["steps"][-1], done - 1).output
        if body["checkpoints"][-1] != done:
            raise InputError(f"{progress}: last checkpoint {body['checkpoints'][-1]} is not state {done}")
    except (ValueError, KeyError, TypeError, IndexError) as exc:
        raise InputError(f"{progress} is damaged ({type(exc).__name__}: {exc}); remove the run directory "
                         f"and train again") from None
    return body, data, claimed


def load_backend(name: str):
    """The kernel backend module `name`; InputError if it cannot run here (e.g. triton without CUDA)."""
    import kernels

    try:
        return kernels.get_backend(name)
    except ImportError as exc:
        raise InputError(f"backend {name} is not available here: {exc}") from None


def single_process_step(cfg: TrainConfig, backend_name: str) -> Callable[..., StepResult]:
    """step_fn(state, batch, trace=None) -> StepResult on one process with the named backend."""
    from p2paudit.engine.step import train_step

    backend = load_backend(backend_name)
    return lambda state, batch, trace=None: train_step(state, batch, cfg, backend, trace)


def train_steps(run_dir: Path | None, body: dict, tokens: np.ndarray, state: dict, cfg: TrainConfig,
                plan: TrainPlan, step_fn: Callable[..., StepResult], on_step: Callable[[StepDone], None] | None) -> None:
    """Run the steps after those in `body`, recording each; checkpoint and save progress every K-th.

    `run_dir` None means "do not write" (ranks other than 0 of a distributed run).
    """
    from p2paudit.engine.schedule import batch_for_step

    data_key = DataSpec.from_dict(body["data"]).data_key
    start = len(body["steps"])
    for n in range(start, plan.steps):
        batch = batch_for_step(tokens, data_key, cfg, n)  # (M, B, T+1)
        recorder = TraceRecorder() if plan.traces else None
        result = step_fn(state, batch, recorder) if recorder is not None else step_fn(state, batch)
        state = result.state
        if run_dir is None:
            continue
        output = digest_state(state)
        trace_digest = None
        if recorder is not None:
            blob = encode_trace(n, recorder.ops)
            write_atomic(run_dir / trace_path(n), blob)
            trace_digest = digest_bytes(blob)
        record = StepRecord(n, digest_batch(batch), float(result.loss), output, trace_digest)
        body["steps"].append(record.to_dict())
        body["loss_curve"].append(record.loss)
        if (n + 1) % plan.ckpt_every == 0 or n + 1 == plan.steps:
            save_checkpoint(run_dir, n + 1, state, output)
            body["checkpoints"].append(n + 1)
            write_atomic(run_dir / PROGRESS_FILE, canonical_json(body))
        if on_step is not None:
            on_step(StepDone(n, plan.steps, record.loss, start))
