"""`p2paudit train-script` and `verify-script`: a lab's own PyTorch script, trained and replayed under the lab mode;
and `verify-range --run DIR` on a lab run (verify_lab_range): its steps as audits, printed and signed as any run's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from p2paudit.cli import cli
from p2paudit.cli.audit_io import node_identity
from p2paudit.errors import InputError, MismatchError

if TYPE_CHECKING:
    from p2paudit.audit.records import StepAudit


@cli.command("train-script")
@click.argument("script_path", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--steps", type=int, default=3, show_default=True, help="Number of training steps.")
@click.option("--backend", type=click.Choice(["cpu", "reference", "triton"]), default="cpu", show_default=True)
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
        node_identity(),
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


def verify_lab_range(
    run_dir: Path,
    steps: str,
    as_json: bool,
    publisher: str | None,
    world_size: int | None,
    attest: bool,
    ledger_path: Path | None,
) -> None:
    """`verify-range STEPS --run DIR` when DIR holds a lab run: replay under the lab mode, print each audit
    as verify-range does, sign them with --attest; exit 1 when any does not match (MismatchError)."""
    import json

    from p2paudit.audit.lab_replay import lab_audits
    from p2paudit.audit.records import VERDICTS
    from p2paudit.audit.replay import parse_step_range
    from p2paudit.cli.audit_io import audit_line, record_in_ledger
    from p2paudit.identity import parse_public_key_hex
    from p2paudit.run.digest import format_digest
    from p2paudit.run.lab_run import lab_publisher, open_lab_run, read_lab_manifest

    if world_size != 1:
        raise InputError("--world-size: a lab run replays in one process (leave it at 1)")
    if publisher is not None and lab_publisher(run_dir) != parse_public_key_hex(publisher):
        raise InputError(
            f"{run_dir}: the lab run is not signed by --publisher {publisher[:16]}... (its script not run)"
        )
    chosen = parse_step_range(steps, read_lab_manifest(run_dir).num_steps)
    span = range(0) if chosen.first is None or chosen.last is None else range(chosen.first, chosen.last + 1)
    view = open_lab_run(run_dir, span)  # the signature is checked before the script is loaded

    def shown(audit: StepAudit) -> None:
        click.echo(audit_line(audit))

    audits = lab_audits(view, chosen.init, span, None if as_json else shown)
    counts = {v: sum(1 for a in audits if a.verdict == v) for v in VERDICTS}
    summary = {"run_id": format_digest(view.run_id), "publisher": view.public_key.hex(), "steps": len(audits),
               **counts, "seconds": sum(a.seconds for a in audits), "replay": "lab"}  # fmt: skip
    if as_json:
        click.echo(json.dumps({"summary": summary, "audits": [a.to_dict() for a in audits], "diagnoses": []}, indent=2))
    else:
        click.echo(
            f"{len(audits)} check(s) of run {summary['run_id']}: {counts['match']} match, {counts['mismatch']} "
            f"mismatch, {counts['error']} error ({summary['seconds']:.2f}s, lab, {view.claims.torch_build}); "
            f"signed by publisher key {summary['publisher']}"
        )
    if attest:
        record_in_ledger(view.run_id, view.num_steps, view.public_key, view.label, audits, ledger_path, as_json)
    bad = sum(1 for a in audits if a.verdict != "match")
    if bad:
        raise MismatchError(f"{bad} of {len(audits)} check(s) did not match the published claim")
