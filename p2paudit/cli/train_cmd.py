"""`p2paudit train`: publish a run (train it, checkpoint it, sign its manifest), with a progress bar."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

import click

from p2paudit.cli import cli
from p2paudit.cli.audit_io import node_identity
from p2paudit.cli.run_cmds import BACKEND_CHOICE

if TYPE_CHECKING:  # heavy imports stay inside the commands
    from p2paudit.engine.config import TrainConfig
    from p2paudit.identity import Identity
    from p2paudit.run.publisher import PublishResult
    from p2paudit.run.training import TrainPlan


class PlanOptions(TypedDict, total=False):
    """What `train` passes to both run.publisher.check_plan and publish_run (their keyword arguments)."""

    config: TrainConfig | None
    data_dir: Path | None
    ignore_memory: bool
    mode: str


class PublishOptions(PlanOptions, total=False):
    """PlanOptions and where publish_run may keep its scratch files."""

    scratch_dir: Path | None


def _publish_with_progress(
    plan: TrainPlan, identity: Identity, as_json: bool = False, **options: Unpack[PublishOptions]
) -> PublishResult:
    """Run the publisher, its steps and the work within each step shown on stderr (cli.progress_display: bars on a
    terminal, JSON lines with --json, nothing in a pipe); returns its PublishResult."""
    from p2paudit.cli.progress_display import train_display
    from p2paudit.run.publisher import publish_run

    with train_display(plan.steps, as_json) as (on_step, within_step):
        return publish_run(plan, identity, on_step, progress=within_step, **options)


@cli.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--config",
    "config_name",
    default="tiny",
    show_default=True,
    help="A preset (tiny, small, 125m, 350m, 1b, tiny-llama, llama-125m) or a JSON file of the whole training config (FILE.json).",
)
@click.option(
    "--data",
    "data_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="A data directory of token ids from `p2paudit data import` (default: the built-in byte corpus).",
)
@click.option(
    "--ignore-memory-check", is_flag=True, help="Train even if the estimated memory exceeds what is available."
)
@click.option("--steps", type=int, default=8, show_default=True, help="Number of training steps.")
@click.option("--micro-batches", type=int, default=None, help="Micro-batches per step (a power of two).")
@click.option("--ckpt-every", type=int, default=1, show_default=True, help="Store a checkpoint every K steps.")
@click.option("--world-size", type=int, default=1, show_default=True, help="Processes (gloo on loopback).")
@click.option("--backend", type=BACKEND_CHOICE, default="cpu", show_default=True)
@click.option("--seed", type=int, default=None, help="Run seed (default 0; a --config file sets its own).")
@click.option("--traces", is_flag=True, help="Also publish every step's operation trace (world size 1).")
@click.option(
    "--arithmetic",
    type=click.Choice(["1", "2"]),
    default=None,
    help="The arithmetic version (docs/arithmetic.md): 2 folds products with a fused multiply-add; 1 does not "
    "(default: what a new run uses, kernels.ARITHMETIC_VERSION, now 2).",
)
@click.option(
    "--mode",
    type=click.Choice(["auto", "in-memory", "streaming"]),
    default="auto",
    show_default=True,
    help="in-memory holds whole states; streaming holds the parameters, one gradient set and one micro-batch's "
    "activations (one process, no traces; the same bytes); auto streams when in-memory would not fit.",
)
@click.option(
    "--scratch-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where a streamed run keeps unpublished states and partial sums (default: $P2PAUDIT_HOME/scratch).",
)
@click.option(
    "--key",
    "key_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Publisher key (default: the node key, created if missing).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON document on stdout; on stderr one JSON line per finished step and progress events within steps.",
)
def train(
    run_dir: Path,
    config_name: str,
    data_dir: Path | None,
    ignore_memory_check: bool,
    steps: int,
    micro_batches: int | None,
    ckpt_every: int,
    world_size: int,
    backend: str,
    seed: int | None,
    traces: bool,
    arithmetic: str | None,
    mode: str,
    scratch_dir: Path | None,
    key_path: Path | None,
    as_json: bool,
) -> None:
    """Train a run into RUN_DIR and sign its manifest; resumes an interrupted run."""
    from p2paudit.engine.config import CONFIGS, count_parameters
    from p2paudit.engine.memory import available_bytes, estimate_memory, format_bytes
    from p2paudit.identity import home_dir, load_identity
    from p2paudit.run.digest import format_digest
    from p2paudit.run.manifest_body import read_config_file
    from p2paudit.run.publisher import check_plan, data_spec
    from p2paudit.run.training import ARITHMETIC_VERSION, TrainPlan

    config = None
    if config_name not in CONFIGS:
        if not config_name.endswith(".json"):
            raise click.UsageError(
                f"--config {config_name[:80]!r} is not a preset ({', '.join(CONFIGS)}) or a .json file"
            )
        if micro_batches is not None or seed is not None:
            raise click.UsageError("--micro-batches and --seed come from the --config file; set them there")
        config = read_config_file(Path(config_name))
        micro_batches, seed = config.micro_batches, config.seed
    plan = TrainPlan(
        run_dir, config.model.name if config else config_name, steps, micro_batches, seed or 0, ckpt_every,
        world_size, backend, traces, ARITHMETIC_VERSION if arithmetic is None else int(arithmetic),
    )  # fmt: skip
    options: PlanOptions = {"config": config, "data_dir": data_dir, "ignore_memory": ignore_memory_check, "mode": mode}
    cfg = check_plan(plan, **options)
    data = data_spec(data_dir)
    estimate = estimate_memory(cfg, data.tokens, data.token_bytes)
    have = available_bytes()
    memory = f"memory per process: {estimate.describe()}; {'unknown' if have is None else format_bytes(have)} available"
    if not as_json:
        click.echo(f"{cfg.model.name}: {count_parameters(cfg.model):,} parameters; {memory}")
    identity = load_identity(key_path) if key_path is not None else node_identity()
    scratch = scratch_dir if scratch_dir is not None else home_dir() / "scratch"
    result = _publish_with_progress(plan, identity, as_json=as_json, scratch_dir=scratch, **options)
    state = (
        "already complete"
        if result.already_complete
        else (f"resumed from state {result.resumed_from}" if result.resumed_from else "trained")
    )
    if as_json:
        summary = {"run_id": format_digest(result.run_id), "steps": result.steps, "run_dir": str(run_dir)}
        click.echo(json.dumps({**summary, "state": state, "model": cfg.model.name, "memory": memory}))
        return
    click.echo(f"run {format_digest(result.run_id)}: {result.steps} steps in {run_dir} ({state})")
