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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from p2paudit import __version__, engine
from p2paudit.engine.backends import load_backend, single_process_step
from p2paudit.engine.config import TrainConfig, train_config
from p2paudit.engine.distributed import rank_share
from p2paudit.engine.memory import MemoryEstimate, ReplayPlan, available_bytes, check_fits, estimate_memory, plan_replay
from p2paudit.engine.progress import ProgressHook
from p2paudit.engine.state import init_state, state_names, state_shapes
from p2paudit.errors import InputError, InternalError
from p2paudit.identity import Identity
from p2paudit.run.checkpoint import load_checkpoint, open_checkpoint, save_checkpoint
from p2paudit.run.data_dir import copy_shards, read_data_spec
from p2paudit.run.digest import StateDigest, digest_state, format_digest
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE, read_manifest, read_progress, write_manifest
from p2paudit.run.manifest_body import RUN_FORMAT, RUN_VERSION, canonical_json, check_data_for_config
from p2paudit.run.shards import (
    CORPUS_NAME,
    DataSpec,
    corpus_tokens,
    describe_corpus,
    load_tokens,
    write_shards,
)
from p2paudit.run.storage import lock_directory, remove_temp_files, write_atomic
from p2paudit.run.streamed_step import write_initial_state
from p2paudit.run.streamed_training import train_steps_streamed
from p2paudit.run.training import PROGRESS_FILE, StepDone, TrainPlan, train_steps
from p2paudit.run.workers import train_distributed

SCHEDULE_NAME = "p2paudit.engine.schedule.batch_for_step/v1"
# What a run directory may hold; anything else means it is not ours to write into.
RUN_SUBDIRS = ("shards", "checkpoints", "traces")
RUN_ENTRIES = {*RUN_SUBDIRS, PROGRESS_FILE, MANIFEST_FILE, SIGNATURE_FILE}


@dataclass(frozen=True)
class PublishResult:
    """The finished run: id, directory, number of steps, and whether it was already complete."""

    run_id: bytes
    run_dir: Path
    steps: int
    already_complete: bool
    resumed_from: int


def check_plan(
    plan: TrainPlan,
    config: TrainConfig | None = None,
    data_dir: Path | None = None,
    ignore_memory: bool = False,
    mode: str = "in-memory",
) -> TrainConfig:
    """The plan's TrainConfig; InputError for a plan that cannot run (numbers out of range, a world
    size the micro-batches cannot be split over, a directory that is not a run's, data the model's
    vocabulary does not cover, more memory than this machine has unless `ignore_memory`).

    `config`: a config (from `train --config FILE.json`) used instead of the preset plan.config;
    `data_dir`: a data directory of imported token ids (`p2paudit data import`) instead of the corpus;
    `mode`: how a step holds its state (engine.memory.REPLAY_MODES; see step_plan)."""
    if plan.steps < 1:
        raise InputError(f"--steps is {plan.steps}, want >= 1")
    if not 1 <= plan.ckpt_every <= plan.steps:
        # One encoding per run: K > N would checkpoint exactly the states K = N does.
        raise InputError(
            f"--ckpt-every is {plan.ckpt_every}, want 1..--steps ({plan.steps}); the last state is always checkpointed"
        )
    if plan.world_size < 1:
        raise InputError(f"--world-size is {plan.world_size}, want >= 1")
    if plan.traces and plan.world_size != 1:
        raise InputError(f"--traces needs --world-size 1, got {plan.world_size}")
    cfg = (
        config
        if config is not None
        else train_config(plan.config, micro_batches=plan.micro_batches, seed=plan.seed, steps=plan.steps)
    )
    data = data_spec(data_dir)
    check_data_for_config(data, cfg)
    estimate = estimate_memory(cfg, data.tokens, data.token_bytes)
    streaming = step_plan(plan, estimate, mode, available_bytes()).streaming
    if not ignore_memory and streaming:
        check_fits(estimate.streaming_replay, f"training {cfg.model.name} streaming (one process)")
    elif not ignore_memory:
        check_fits(plan.world_size * estimate.train_step, f"training {cfg.model.name} on {plan.world_size} process(es)")
    load_backend(plan.backend, plan.arithmetic)
    if plan.world_size > 1:
        rank_share(cfg, 0, plan.world_size)
    _check_directory(plan.run_dir)
    return cfg


def step_plan(plan: TrainPlan, estimate: MemoryEstimate, mode: str, have: int | None) -> ReplayPlan:
    """Whether the steps stream (run.streamed_training) and spill: as engine.memory.plan_replay decides
    from the train step's needs, but never with traces or on several processes (InputError if asked)."""
    if mode == "streaming" and (plan.traces or plan.world_size != 1):
        raise InputError("a streamed run is trained on one process and without --traces")
    if plan.traces or plan.world_size != 1:
        return ReplayPlan(False, False)
    return plan_replay(replace(estimate, replay=estimate.train_step), mode, have)


def data_spec(data_dir: Path | None) -> DataSpec:
    """The data a run trains on: the built-in corpus's spec, or that of the data directory `data_dir`."""
    return read_data_spec(data_dir) if data_dir is not None else describe_corpus(CORPUS_NAME)


def new_body(cfg: TrainConfig, data: DataSpec, initial: StateDigest, plan: TrainPlan) -> dict[str, Any]:
    """The manifest body before any step: everything but the step records."""
    return {
        "format": RUN_FORMAT,
        "version": RUN_VERSION,
        "arithmetic_version": plan.arithmetic,
        "engine_version": engine.ENGINE_VERSION,
        "created_by": f"p2paudit {__version__}",
        "config": cfg.to_dict(),
        "steps_planned": plan.steps,
        "checkpoint_every": plan.ckpt_every,
        "data": data.to_dict(),
        "schedule": {
            "function": SCHEDULE_NAME,
            "data_key": format_digest(data.data_key),
            "seed": cfg.seed,
            "micro_batches": cfg.micro_batches,
            "batch_size": cfg.batch_size,
            "seq_len": cfg.model.seq_len,
        },
        "initial_state": initial.to_dict(),
        "steps": [],
        "loss_curve": [],
        "checkpoints": [0],
        "traces": plan.traces,
    }


def _same_plan(head: dict[str, Any], cfg: TrainConfig, plan: TrainPlan) -> bool:
    return (
        head.get("config") == json.loads(canonical_json(cfg.to_dict()))
        and head.get("arithmetic_version") == plan.arithmetic
        and head.get("steps_planned") == plan.steps
        and head.get("checkpoint_every") == plan.ckpt_every
        and head.get("traces", False) == plan.traces
    )


def _check_directory(run_dir: Path) -> None:
    if run_dir.exists() and not run_dir.is_dir():
        raise InputError(f"run directory {run_dir} is a file")
    strangers = (
        sorted(p.name for p in run_dir.iterdir() if p.name not in RUN_ENTRIES and not p.name.endswith(".tmp"))
        if run_dir.is_dir()
        else []
    )
    if strangers:
        raise InputError(
            f"run directory {run_dir} holds {strangers[0]} (and {len(strangers) - 1} more), "
            f"not a p2paudit run; choose an empty or new directory"
        )


def publish_run(
    plan: TrainPlan,
    identity: Identity,
    on_step: Callable[[StepDone], None] | None = None,
    config: TrainConfig | None = None,
    data_dir: Path | None = None,
    ignore_memory: bool = False,
    mode: str = "in-memory",
    scratch_dir: Path | None = None,
    *,
    progress: ProgressHook | None = None,
) -> PublishResult:
    """Train `plan` into plan.run_dir (resuming if interrupted), sign and write the manifest.

    Returns at once if the directory already holds the finished run of this
    plan; raises InputError if it holds a different run. `config`, `data_dir`,
    `ignore_memory`, `mode`: as for check_plan. A streamed run keeps its
    uncheckpointed states and partial sums under `scratch_dir` (needed then).
    The bytes of the run do not depend on `mode`. `progress` gets the step core's events
    (engine.progress) with `step` set (from rank 0 when on several processes).
    """
    cfg = check_plan(plan, config, data_dir, ignore_memory, mode)
    data = data_spec(data_dir)
    steps = step_plan(plan, estimate_memory(cfg, data.tokens, data.token_bytes), mode, available_bytes())
    if steps.streaming and scratch_dir is None:
        raise InternalError("a streamed run needs a scratch directory")
    run_dir = plan.run_dir
    if (run_dir / MANIFEST_FILE).exists() and not (run_dir / PROGRESS_FILE).exists():
        manifest = read_manifest(run_dir)
        if not _same_plan(manifest.head, cfg, plan) or manifest.data != data_spec(data_dir):
            raise InputError(
                f"run directory {run_dir} already holds a finished run with another config, --steps or --ckpt-every"
            )
        return PublishResult(manifest.run_id, run_dir, manifest.num_steps, True, manifest.num_steps)
    run_dir.mkdir(parents=True, exist_ok=True)
    with lock_directory(run_dir):
        # A killed writer leaves `.NAME.PID.tmp` files wherever it was writing; every one must go,
        # or the resumed run is no longer byte-identical to an uninterrupted one.
        for directory in (run_dir, *(run_dir / sub for sub in RUN_SUBDIRS)):
            remove_temp_files(directory)
        body, tokens, state = _start_or_resume(run_dir, cfg, plan, data_dir, steps.streaming)
        resumed_from = len(body["steps"])
        if steps.streaming:
            if scratch_dir is None:  # refused above, before the run directory was touched
                raise InternalError("a streamed run needs a scratch directory")
            start = _last_claimed(body)
            train_steps_streamed(
                run_dir, body, tokens, start, cfg, plan, scratch_dir, steps.spill, on_step, progress=progress
            )
        elif state is None:
            raise InternalError("an in-memory run was started without its state")
        elif plan.world_size > 1:
            train_distributed(run_dir, body, tokens, state, cfg, plan, on_step, progress=progress)
        else:
            step_fn = single_process_step(cfg, plan.backend, plan.arithmetic)
            train_steps(run_dir, body, tokens, state, cfg, plan, step_fn, on_step, progress=progress)
        run_id = write_manifest(run_dir, body, identity)
        (run_dir / PROGRESS_FILE).unlink(missing_ok=True)
    return PublishResult(run_id, run_dir, plan.steps, False, resumed_from)


def _last_claimed(body: dict[str, Any]) -> StateDigest:
    """The digest of the state the steps so far end at (state 0 before any)."""
    last = body["steps"][-1]["output"] if body["steps"] else body["initial_state"]
    return StateDigest.from_dict(last, "progress")


def _start_or_resume(
    run_dir: Path, cfg: TrainConfig, plan: TrainPlan, data_dir: Path | None = None, streaming: bool = False
) -> tuple[dict[str, Any], np.ndarray, dict[str, np.ndarray] | None]:
    """(body so far, corpus tokens, state at the last checkpoint), writing shards and state 0 if new.

    The shards are the built-in corpus's, or copies of those in `data_dir` (imported token ids).
    `streaming`: the state is never held whole (None is returned); the last checkpoint is checked
    one tensor at a time and state 0 is written one tensor at a time."""
    progress = run_dir / PROGRESS_FILE
    if progress.exists():
        body, data, claimed = _read_progress(progress, cfg, plan)
        if data != data_spec(data_dir):
            raise InputError(f"{progress} belongs to a run on other data; resume it with the same --data")
        tokens = load_tokens(run_dir, data)
        n = len(body["steps"])
        if streaming:
            with open_checkpoint(run_dir, n, claimed, state_names(cfg), state_shapes(cfg)) as reader:
                reader.verify(claimed)
            return body, tokens, None
        state: dict[str, np.ndarray] | None = load_checkpoint(run_dir, n, claimed, state_names(cfg), state_shapes(cfg))
        return body, tokens, state
    if data_dir is not None:
        data = read_data_spec(data_dir)
        copy_shards(data_dir, data, run_dir)
    else:
        data = write_shards(run_dir, corpus_tokens())
    tokens = load_tokens(run_dir, data)
    if streaming:
        state, initial = None, write_initial_state(run_dir, cfg)
    else:
        state = init_state(cfg)
        initial = digest_state(state)
        save_checkpoint(run_dir, 0, state, initial)
    body = new_body(cfg, data, initial, plan)
    write_atomic(progress, canonical_json(body))
    return body, tokens, state


def _read_progress(progress: Path, cfg: TrainConfig, plan: TrainPlan) -> tuple[dict[str, Any], DataSpec, StateDigest]:
    """(body so far, its data spec, claimed digest of its last checkpointed state) from progress.json.

    The file is checked as strictly as a manifest: a bounded regular file, safe JSON, every field."""
    try:
        body, parsed = read_progress(progress)
    except InputError as exc:
        raise InputError(f"{progress} is damaged ({exc}); remove the run directory and train again") from None
    if not _same_plan(body, cfg, plan):
        raise InputError(
            f"{progress} belongs to a run with another config, --steps or --ckpt-every; "
            f"resume it with the same flags or use another directory"
        )
    claimed = parsed.steps[-1].output if parsed.steps else parsed.initial_state
    return body, parsed.data, claimed
