"""`p2paudit ledger ...`: query and maintain the node's attestation ledger.

A thin adapter: parse options, call p2paudit.attest, print text or --json.
The ledger is home_dir()/ledger.db unless --ledger PATH is given.

Commands that only read (coverage, disputes, equivocations, show, proof,
consistency, verify, export, and checkpoint when the latest one is current)
open the ledger read-only, so they work in a read-only home. SQLite's
refusals become one line that says what is wrong (ledger.database).

This module holds the group, the options and openers every ledger command
shares, and the queries about runs (add-run, coverage, disputes,
equivocations, show); ledger_log_cmds.py holds the commands about the log
itself (proof, consistency, checkpoint, verify, import, export).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from p2paudit.cli import cli
from p2paudit.defaults import DEFAULT_REDUNDANCY

if TYPE_CHECKING:
    from p2paudit.attest.queries import Coverage, Evidence, StepCoverage
    from p2paudit.attest.runs import RunInfo
    from p2paudit.attest.store import AttestationStore

F = TypeVar("F", bound=Callable[..., Any])


def ledger_option(func: F) -> F:
    return click.option(
        "--ledger",
        "ledger_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Ledger file (default: $P2PAUDIT_HOME/ledger.db).",
    )(func)


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(func)


def ledger_file(ledger_path: Path | None) -> Path:
    from p2paudit.identity import home_dir

    return ledger_path if ledger_path is not None else home_dir() / "ledger.db"


@contextmanager
def _sqlite_errors(path: Path, action: str) -> Iterator[None]:
    """Turn a SQLite error escaping a query into one line that says what is wrong with the file."""
    from ledger.database import describe_error

    try:
        yield
    except sqlite3.Error as exc:
        raise describe_error(exc, str(path), action) from None


@contextmanager
def open_existing(ledger_path: Path | None) -> Iterator[AttestationStore]:
    """The existing ledger, opened read-only: nothing is created or written."""
    from p2paudit.attest.store import AttestationStore

    path = ledger_file(ledger_path)
    with _sqlite_errors(path, "answer the query"), AttestationStore.open_readonly(path) as store:
        yield store


@contextmanager
def open_for_writing(ledger_path: Path | None) -> Iterator[AttestationStore]:
    """The existing ledger, opened for writing; refused (nothing created) when there is none."""
    from p2paudit.attest.store import AttestationStore

    path = ledger_file(ledger_path)
    with _sqlite_errors(path, "store it"), AttestationStore.open(path) as store:
        yield store


@contextmanager
def open_or_create(ledger_path: Path | None) -> Iterator[AttestationStore]:
    """Open the ledger, creating it under the node's own origin (which needs `p2paudit init`)."""
    from p2paudit.attest.store import AttestationStore, read_origin
    from p2paudit.attest.tables import origin_for
    from p2paudit.identity import load_node_identity

    path = ledger_file(ledger_path)
    origin = None if read_origin(path) is not None else origin_for(load_node_identity().public_key)
    with _sqlite_errors(path, "store it"), AttestationStore.open(path, origin) as store:
        yield store


def echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2))


def _pick_run(store: AttestationStore, run: str | None) -> bytes:
    """The run --run names (a whole id or a unique prefix), or the ledger's only run."""
    from p2paudit.attest.runs import resolve_run_id
    from p2paudit.errors import InputError

    runs = store.runs()
    if run is not None:
        return resolve_run_id(runs, run)
    if len(runs) != 1:
        raise InputError(f"the ledger knows {len(runs)} runs; name one with --run RUN_ID (p2paudit ledger runs)")
    return runs[0].run_id


RUN_OPTION_HELP = "Run id (hex) or a unique prefix of one; needed when the ledger knows several runs."


@cli.group()
def ledger() -> None:
    """The attestation ledger: coverage, disputes, proofs, checkpoints."""


@ledger.command("add-run")
@click.argument("run_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--id", "run_hex", default=None, help="Run id (hex) when no run directory is given.")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Number of steps, with --id.")
@click.option("--label", default=None, help="A name for the run.")
@ledger_option
def add_run(
    run_dir: Path | None, run_hex: str | None, steps: int | None, label: str | None, ledger_path: Path | None
) -> None:
    """Make a run known, from its signed manifest (RUN_DIR) or from --id and --steps."""
    from p2paudit.attest.report import parse_run_id
    from p2paudit.errors import InputError

    if run_dir is not None:
        if run_hex is not None or steps is not None:
            raise InputError("give either RUN_DIR or --id with --steps, not both")
        from p2paudit.run.manifest import read_manifest

        manifest = read_manifest(run_dir)  # checks the publisher's signature and the run id
        run_id, steps, label = manifest.run_id, manifest.num_steps, label or run_dir.name
        publisher = manifest.public_key
    elif run_hex is None or steps is None:
        raise InputError("give RUN_DIR, or both --id and --steps")
    else:
        run_id, publisher = parse_run_id(run_hex), None
    with open_or_create(ledger_path) as store:
        info = store.register_run(run_id, steps, label or "", publisher)
    click.echo(f"run {info.run_id.hex()} known: {info.steps} steps{f' ({info.label})' if info.label else ''}")


@ledger.command()
@json_option
@ledger_option
def runs(as_json: bool, ledger_path: Path | None) -> None:
    """The runs the ledger knows: id, label, steps, and how much of each every key has checked."""
    from p2paudit.attest import queries

    with open_existing(ledger_path) as store:
        found = [(info, queries.coverage(store, info.run_id), store.publishers(info.run_id)) for info in store.runs()]
    if as_json:
        echo_json([_run_dict(info, cov, publishers) for info, cov, publishers in found])
        return
    if not found:
        click.echo("the ledger knows no runs: p2paudit ledger add-run RUN_DIR (or a daemon's --run) adds one")
        return
    click.echo(f"{len(found)} runs (coverage by all keys, untrusted; ledger coverage --run ID --trusted FILE)")
    for info, cov, _ in found:
        click.echo(
            f"{info.run_id.hex()}  {info.label or '-'!r}  {info.steps} steps, {cov.keys} keys: checked "
            f"{cov.checked_once} steps ({cov.percent(cov.checked_once):.1f}%), "
            f"{cov.with_mismatch} with a mismatch; initial state "
            f"{'checked by ' + str(cov.initial_state.checked) + ' keys' if cov.initial_state else 'not checked'}"
        )


def _run_dict(info: RunInfo, cov: Coverage, publishers: tuple[bytes, ...]) -> dict[str, Any]:
    initial = cov.initial_state
    return {
        "run_id": info.run_id.hex(),
        "label": info.label,
        "steps": info.steps,
        "publishers": [key.hex() for key in publishers],
        "keys": cov.keys,
        "checked_at_least_once": cov.checked_once,
        "percent_at_least_once": round(cov.percent(cov.checked_once), 3),
        "steps_with_mismatch": cov.with_mismatch,
        "initial_state_checked_by": initial.checked if initial is not None else 0,
    }


@ledger.command()
@click.option("--run", "run", default=None, help=RUN_OPTION_HELP)
@click.option(
    "--trusted",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="File of trusted verifier keys, one hex key per line ('#' comments).",
)
@click.option(
    "--min",
    "min_count",
    type=click.IntRange(min=1),
    default=DEFAULT_REDUNDANCY,
    show_default=True,
    help="R: report steps checked by at least R distinct keys (default: the network's redundancy).",
)
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write a coverage plot.")
@json_option
@ledger_option
def coverage(
    run: str | None, trusted: Path | None, min_count: int, png: Path | None, as_json: bool, ledger_path: Path | None
) -> None:
    """Per step, how many distinct keys attested a match, a mismatch, an error."""
    from p2paudit.attest import queries, report

    trusted_keys = queries.load_trusted_keys(trusted) if trusted is not None else None
    with open_existing(ledger_path) as store:
        run_id = _pick_run(store, run)
        everyone = queries.coverage(store, run_id, None, min_count)
        chosen = queries.coverage(store, run_id, trusted_keys, min_count) if trusted_keys is not None else None
        if png is not None:  # the explorer's aggregation: readable at 100,000 steps
            from p2paudit.cli.coverage_png import write_coverage_png

            write_coverage_png(png, store, run_id, trusted_keys, min_count)
    tables = [everyone] + ([chosen] if chosen is not None else [])
    if as_json:
        echo_json(
            {
                "run_id": run_id.hex(),
                "label": everyone.run.label,
                "steps": everyone.run.steps,
                "all_keys": report.coverage_dict(everyone),
                "trusted_keys": report.coverage_dict(chosen) if chosen is not None else None,
            }
        )
        return
    click.echo(f"run {run_id.hex()} {everyone.run.label!r}: {everyone.run.steps} steps, R = {min_count}")
    for cov in tables:
        view = report.coverage_dict(cov)
        click.echo(
            f"{view['label']}, {cov.keys} keys: checked >= 1: {cov.checked_once} steps "
            f"({view['percent_at_least_once']:.1f}%), >= {min_count}: {cov.checked_min} steps "
            f"({view['percent_at_least_min']:.1f}%), steps with a mismatch: {cov.with_mismatch}"
        )
        click.echo(f"  {_initial_state_line(cov.initial_state)}")
    if trusted_keys is None:
        click.echo("no --trusted file: every figure above counts untrusted keys")
    click.echo("step  checked  match  mismatch  error   (all keys)")
    for item in everyone.per_step:
        click.echo(f"{item.step:>4}  {item.checked:>7}  {item.match:>5}  {item.mismatch:>8}  {item.error:>5}")


def _initial_state_line(item: StepCoverage | None) -> str:
    """The init claim's counts: state 0 as the recipe builds it is a claim of its own, not step 0."""
    if item is None:
        return "initial state (state 0 as the recipe builds it): no attestation"
    return (
        f"initial state (state 0 as the recipe builds it): checked by {item.checked} keys "
        f"({item.match} match, {item.mismatch} mismatch), {item.error} error"
    )


def _claim_name(step: int) -> str:
    """What an index step names: a step, or (INIT_INDEX_STEP) the initial state."""
    from p2paudit.attest.record_v2 import INIT_INDEX_STEP

    return "the initial state" if step == INIT_INDEX_STEP else f"step {step}"


def _evidence_lines(side: tuple[Evidence, ...]) -> str:
    first = side[0]
    observed = first.observed.hex()[:16] + "..." if first.observed else "none"
    signers = ", ".join(f"{item.verifier.hex()[:16]}... (index {item.index})" for item in side)
    return f"  {first.verdict} observed {observed} by {signers}"


@ledger.command()
@click.option("--run", "run", default=None, help="Only this run (hex id or a unique prefix).")
@json_option
@ledger_option
def disputes(run: str | None, as_json: bool, ledger_path: Path | None) -> None:
    """Claims with a finding, with the signed evidence: steps (or the initial state) on which different keys
    signed different outcomes (disputed), then those where every key that checked found a mismatch (a lone
    auditor's finding among them). --json lists both, each with "disputed"."""
    from p2paudit.attest import queries, report

    with open_existing(ledger_path) as store:
        found = queries.disputes(store, _pick_run(store, run) if run is not None else None, findings=True)
    if as_json:
        echo_json([report.dispute_dict(item) for item in found])
        return
    disputed = [item for item in found if item.disputed]
    alone = [item for item in found if not item.disputed]
    click.echo(f"{len(found)} claims with a finding: {len(disputed)} disputed between keys, {len(alone)} not disputed")
    click.echo(f"{len(disputed)} disputed claims (steps or the initial state: keys signed different outcomes)")
    for item in disputed:
        click.echo(f"run {item.run_id.hex()[:16]}... {_claim_name(item.step)}: {len(item.sides)} outcomes")
        for side in item.sides:
            click.echo(_evidence_lines(side))
    if alone:
        click.echo(f"{len(alone)} findings no key disputes (every key that checked reported a mismatch)")
    for item in alone:
        keys = len({evidence.verifier for side in item.sides for evidence in side})
        click.echo(
            f"run {item.run_id.hex()[:16]}... {_claim_name(item.step)}: a mismatch, {keys} key(s), no other outcome"
        )
        for side in item.sides:
            click.echo(_evidence_lines(side))


@ledger.command()
@json_option
@ledger_option
def equivocations(as_json: bool, ledger_path: Path | None) -> None:
    """Keys that signed two results for one step, and tree heads of one size with two roots."""
    from p2paudit.attest import queries, report

    with open_existing(ledger_path) as store:
        found = queries.equivocations(store)
    if as_json:
        echo_json(report.equivocations_dict(found))
        return
    click.echo(f"{len(found.keys)} key equivocations, {len(found.tree_heads)} tree-head split views")
    for item in found.keys:
        indices = ", ".join(str(e.index) for e in item.evidence)
        click.echo(
            f"key {item.verifier.hex()[:16]}... run {item.run_id.hex()[:16]}... {_claim_name(item.step)}: "
            f"{len(item.evidence)} signed entries (indices {indices})"
        )
    for view in found.tree_heads:
        click.echo(
            f"log {view.origin} key {_vkey_key(view.vkey)}: size {view.size} signed with {len(view.roots)} roots"
        )


def _vkey_key(vkey: str) -> str:
    """The key (not the name, which is the signer's to choose) whose signatures of a split view were verified."""
    from ledger import CheckpointError, NoteVerifier

    try:
        return NoteVerifier.from_vkey(vkey).public_key.hex()[:16] + "..."
    except CheckpointError:
        return "(unreadable key)"


def claimed_time(time_ms: int) -> str:
    """A signer's own time, which nothing checks: labelled as its claim, as a UTC date."""
    from datetime import UTC, datetime

    try:
        when = datetime.fromtimestamp(time_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):  # a signed u64 may lie outside any calendar
        when = f"{time_ms} ms since 1970"
    return f"claims time {when} (the signer's word, not checked)"


class ClaimStep(click.ParamType[int, "str | int"]):
    """A step number (0 or more), or "init": the initial state, the claim before step 0."""

    name = "N|init"

    def convert(self, value: str | int, param: click.Parameter | None, ctx: click.Context | None) -> int:
        from p2paudit.attest.record_v2 import INIT_INDEX_STEP

        if value == "init":
            return INIT_INDEX_STEP
        if isinstance(value, int):
            return value
        if not (value.isascii() and value.isdigit()):
            self.fail(f"{value[:40]!r} is not a step number (0 or more) or 'init' (the initial state)", param, ctx)
        return int(value)


@ledger.command()
@click.option("--step", type=ClaimStep(), required=True, help="A step, or 'init' for the initial state (state 0).")
@click.option("--run", "run", default=None, help=RUN_OPTION_HELP)
@json_option
@ledger_option
def show(step: int, run: str | None, as_json: bool, ledger_path: Path | None) -> None:
    """Every attestation stored for one step, or for the initial state (--step init)."""
    from p2paudit.attest.queries import initial_state_coverage
    from p2paudit.attest.record import attestation_to_dict
    from p2paudit.errors import InputError

    with open_existing(ledger_path) as store:
        run_id = _pick_run(store, run)
        info = store.run_info(run_id)
        if step >= info.steps:
            raise InputError(
                f"step {step} is not in run {run_id.hex()[:16]}..., which has {info.steps} steps (0..{info.steps - 1})"
            )
        found = store.step_attestations(run_id, step)
        initial = initial_state_coverage(store, run_id) if step == 0 else None
    if as_json:
        echo_json([{"index": index, **attestation_to_dict(s.attestation)} for index, s in found])
        return
    click.echo(f"run {run_id.hex()} {_claim_name(step)}: {len(found)} attestations")
    for index, signed in found:
        a = signed.attestation
        observed = a.observed_output_digest.hex()[:16] + "..." if a.observed_output_digest else "none"
        click.echo(
            f"  [{index}] {a.verdict:<8} observed {observed} by {a.verifier.hex()[:16]}... "
            f"{a.backend} on {a.hardware or '?'}, {claimed_time(a.time_ms)}"
        )
    if initial is not None:  # state 0 has two claims: the recipe's initial state, and step 0's input
        click.echo(f"{_initial_state_line(initial)}: ledger show --step init")
