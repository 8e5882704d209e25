"""`p2paudit train-script` and `verify-script`: a lab's own PyTorch script, trained and replayed under the lab mode."""

from __future__ import annotations

from pathlib import Path

import click

from p2paudit.cli import cli
from p2paudit.cli.run_cmds import _node_identity
from p2paudit.errors import MismatchError


@cli.command("train-script")
@click.argument("script_path", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--steps", type=int, default=3, show_default=True, help="Number of training steps.")
@click.option("--backend", type=click.Choice(["cpu", "reference"]), default="cpu", show_default=True)
@click.option(
    "--arithmetic",
    type=click.Choice(["1", "2"]),
    default=None,
    help="Arithmetic version of the canonical ops (default: what a new run uses, kernels.ARITHMETIC_VERSION, now 2).",
)
@click.option("--values", is_flag=True, help="Also publish every op's output digests (names a forged op).")
def train_script_cmd(
    script_path: Path, run_dir: Path, steps: int, backend: str, arithmetic: str | None, values: bool
) -> None:
    """Train SCRIPT_PATH (build, batch, train_step) under the strict canonical mode and publish it to RUN_DIR."""
    from p2paudit.run.lab_run import train_lab_run

    if steps < 1:
        raise click.BadParameter(f"--steps must be at least 1, got {steps}")
    claims, run_id = train_lab_run(
        script_path,
        run_dir,
        steps,
        _node_identity(),
        backend=backend,
        arithmetic=None if arithmetic is None else int(arithmetic),
        values=values,
    )
    for n, state in enumerate(claims.states):
        click.echo(f"step {n} state {state.text()} trace sha256:{claims.traces[n].hex()}")
    click.echo(f"run sha256:{run_id.hex()} ({claims.torch_build}, op table {claims.op_table_version}, "
               f"arithmetic {claims.arithmetic_version})")  # fmt: skip


@cli.command("verify-script")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--steps", "step_range", default=None, help="A..B (default: every step).")
def verify_script_cmd(run_dir: Path, step_range: str | None) -> None:
    """Replay steps of a lab run under the lab mode; exit 1 if any step's state or op graph differs."""
    from p2paudit.audit.lab_replay import verify_lab_steps
    from p2paudit.run.lab_run import read_lab_run

    if step_range is None:
        first, last = 0, len(read_lab_run(run_dir)[1].states) - 1
    else:
        try:
            a, b = step_range.split("..")
            first, last = int(a), int(b)
        except ValueError:
            raise click.BadParameter(f"--steps must be A..B, got {step_range!r}") from None
    _, verdicts = verify_lab_steps(run_dir, first, last)
    bad = 0
    for v in verdicts:
        ok = v.state_matches and v.trace_matches
        bad += not ok
        click.echo(f"step {v.step}: {'match' if ok else 'MISMATCH'}" + "".join(f"; {f}" for f in v.findings))
    if bad:
        raise MismatchError(f"{bad} of {len(verdicts)} steps did not match")
