"""`p2paudit verify-range`: replay a range of a published run's steps (local or remote) and compare the claim."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from p2paudit.cli import cli
from p2paudit.cli.audit_io import audit_line, record_in_ledger
from p2paudit.cli.remote_options import allow_other_hosts_option, cache_size_option, silence_option

if TYPE_CHECKING:  # heavy imports stay inside the commands
    from p2paudit.audit.records import StepAudit
    from p2paudit.audit.replay import RangeReport
    from p2paudit.run.manifest import Manifest
    from p2paudit.run.remote import RemoteRun

BACKEND_CHOICE = click.Choice(["cpu", "reference", "triton"])


def _summary(report: RangeReport, manifest: Manifest) -> dict[str, Any]:
    from p2paudit.audit.records import VERDICTS
    from p2paudit.run.digest import format_digest

    counts = {v: sum(1 for a in report.audits if a.verdict == v) for v in VERDICTS}
    return {
        "run_id": format_digest(manifest.run_id),
        "publisher": manifest.public_key.hex(),
        "steps": len(report.audits),
        **counts,
        "seconds": sum(a.seconds for a in report.audits),
        "replay": report.replay,
    }


WORLD_FROM_ENV = "from-env"


def _world_size(text: str) -> int | None:
    """--world-size: a process count, or None for "from-env" (torchrun's group); one-line exit 2 otherwise."""
    if text == WORLD_FROM_ENV:
        return None
    if not (text.isascii() and text.isdigit() and len(text) <= 6):
        from p2paudit.errors import InputError

        raise InputError(f"--world-size {text[:20]!r} is not a process count or {WORLD_FROM_ENV}")
    return int(text)


@dataclass(frozen=True)
class ReplayOptions:
    """verify-range's replay options: the memory check's override, the replay mode, the scratch directory,
    and whether a lab run fetched from a URL may be replayed (its publisher's script run here)."""

    ignore_memory: bool = False
    mode: str = "auto"
    scratch_dir: Path | None = None
    run_lab_code: bool = False

    def scratch(self) -> Path:
        from p2paudit.identity import home_dir

        return self.scratch_dir if self.scratch_dir is not None else home_dir() / "scratch"


def _verify(
    run_dir: Path,
    steps: str,
    backend: str,
    as_json: bool,
    against: str | None = None,
    publisher: str | None = None,
    world_size: int | None = 1,
    replay: ReplayOptions | None = None,
    partial_data: bool = False,
) -> RangeReport | None:
    """Open and check the run, replay the range (on world_size processes; None: torchrun's group), print.

    `partial_data`: run_dir holds only the shards the steps read (a remote run's view; audit.remote_view).
    Returns the report, or None on a rank other than 0 of torchrun's group (it prints nothing).
    """
    from functools import partial

    from p2paudit.audit.distributed_replay import ReplayTask, verify_range_from_env, verify_range_spawned
    from p2paudit.audit.remote_view import open_partial_run
    from p2paudit.audit.replay import open_run

    replay = replay or ReplayOptions()
    if partial_data:
        opener = partial(open_partial_run, run_dir, steps, ignore_memory=replay.ignore_memory, mode=replay.mode)
    else:
        opener = partial(open_run, run_dir, ignore_memory=replay.ignore_memory, mode=replay.mode)
    from p2paudit.cli.progress_display import step_progress

    task = ReplayTask(opener, steps, backend, against, publisher, replay.mode, replay.scratch())
    with step_progress(as_json) as shown:  # a bar on a terminal's stderr, JSON lines with --json, else nothing

        def on_audit(audit: StepAudit) -> None:
            shown.echo(audit_line(audit))

        audits = None if as_json else on_audit
        if world_size is None:
            rank, view, report = verify_range_from_env(task, audits, progress=shown.hook)
            if rank != 0:
                return None
        else:
            view, report = verify_range_spawned(task, world_size, audits, progress=shown.hook)
    summary = _summary(report, view.manifest)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "summary": summary,
                    "audits": [x.to_dict() for x in report.audits],
                    "diagnoses": [d.to_dict() for d in report.diagnoses],
                },
                indent=2,
            )
        )
        return report
    for diagnosis in report.diagnoses:
        for line in diagnosis.lines():
            click.echo(line)
    click.echo(
        f"{summary['steps']} check(s) of run {summary['run_id']}: {summary['match']} match, "
        f"{summary['mismatch']} mismatch, {summary['error']} error ({summary['seconds']:.2f}s, {report.replay}); "
        f"signed by publisher key {summary['publisher']}"
    )
    return report


def _attest(run_dir: Path, report: RangeReport, ledger_path: Path | None, as_json: bool = False) -> None:
    """Sign every audited step with the node key and append it to the node's ledger; print where."""
    from p2paudit.run.manifest import read_manifest

    manifest = read_manifest(run_dir)
    record_in_ledger(
        manifest.run_id, manifest.num_steps, manifest.public_key, run_dir.name, report.audits, ledger_path, as_json
    )


@contextmanager
def _remote_run_dir(
    url: str,
    steps: str,
    cache_dir: Path | None,
    cache_size: int,
    timeout: float,
    replay: ReplayOptions,
    publisher: str | None = None,
    other_hosts: bool = False,
) -> Iterator[tuple[Path, bool]]:
    """Fetch what `steps` of the run at `url` need (rich progress bars on stderr: bytes and rates),
    verified into the cache; yields a local run directory of them for the replay (only the shards
    the steps read: open it with audit.remote_view.open_partial_run) and whether it is a lab run's
    (run.remote_lab's view: open it with run.lab_run.open_lab_run). The replay's memory is checked
    right after the manifest is fetched, before any shard or checkpoint (for replay.mode, unless
    replay.ignore_memory); `publisher` (hex) right after the signature file, before the manifest."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TransferSpeedColumn

    from p2paudit.audit.replay import parse_step_range
    from p2paudit.identity import home_dir, parse_public_key_hex
    from p2paudit.run.cache import BlobCache
    from p2paudit.run.http_guard import TransferLimits
    from p2paudit.run.remote import RemoteRun

    pinned = None if publisher is None else frozenset([parse_public_key_hex(publisher)])
    limits = TransferLimits(read_timeout=timeout, other_hosts=other_hosts)
    cache = BlobCache(cache_dir if cache_dir is not None else home_dir() / "cache", cache_size)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as progress:
        tasks: dict[str, TaskID] = {}

        def on_progress(path: str, done: int, total: int | None) -> None:
            if path not in tasks:
                tasks[path] = progress.add_task(path, total=total)
            progress.update(tasks[path], completed=done, total=total)

        with RemoteRun(url, cache, on_progress, publishers=pinned, limits=limits) as remote:
            lab = remote.signed_as_lab()
            if lab:
                view = _remote_lab_view(remote, steps, replay)
            else:
                step_range = parse_step_range(steps, remote.manifest.num_steps)
                view = remote.local_view(step_range.first, step_range.last, replay.ignore_memory, replay.mode)
            with view as run_dir:
                progress.stop()
                stats = remote.stats
                click.echo(
                    f"fetched {stats.received_bytes} bytes from {url}; {len(stats.cached)} file(s) from cache {cache.root}",
                    err=True,
                )
                yield run_dir, lab


def _remote_lab_view(remote: RemoteRun, steps: str, replay: ReplayOptions) -> AbstractContextManager[Path]:
    """The local view of the lab run `remote` serves that replaying `steps` needs (run.remote_lab), once
    --run-lab-code allows running its publisher's script here: refused before anything but its signature
    and manifest is fetched."""
    from p2paudit.audit.replay import parse_step_range
    from p2paudit.errors import InputError
    from p2paudit.run.remote_lab import RemoteLabRun

    if not replay.run_lab_code:
        raise InputError(
            f"{remote.base} is a lab run (train-script's): replaying it runs its publisher's script here; "
            "pass --run-lab-code to allow it (for publishers you would let run code: pin one with --publisher)"
        )
    lab = RemoteLabRun(remote)
    chosen = parse_step_range(steps, lab.manifest.num_steps)
    span = range(0) if chosen.first is None or chosen.last is None else range(chosen.first, chosen.last + 1)
    return lab.local_view(span, replay.ignore_memory)


@contextmanager
def _local_run_dir(
    run: str,
    steps: str,
    cache_dir: Path | None,
    cache_size: int,
    timeout: float,
    replay: ReplayOptions,
    publisher: str | None = None,
    other_hosts: bool = False,
) -> Iterator[tuple[Path, bool, bool]]:
    """(run directory, whether it holds only the shards `steps` read, whether it is a lab run's view): the
    directory `run`, or for an http(s) URL a local view of the verified files `steps` need."""
    from p2paudit.run.remote import is_remote

    if not is_remote(run):
        yield Path(run), False, False
        return
    with _remote_run_dir(run, steps, cache_dir, cache_size, timeout, replay, publisher, other_hosts) as (view, lab):
        yield view, True, lab


@cli.command("verify-range")
@click.argument("steps")
@click.option(
    "--run",
    "run_dir",
    required=True,
    help="The run: a directory, or an http:// or https:// base URL (files fetched as needed).",
)
@click.option("--backend", type=BACKEND_CHOICE, default="cpu", show_default=True)
@click.option(
    "--against",
    type=BACKEND_CHOICE,
    default=None,
    help="Backend to bisect a mismatch against (default: reference, or cpu when --backend reference).",
)
@click.option(
    "--publisher",
    default=None,
    metavar="KEYHEX",
    help="Refuse the run unless its manifest is signed by this Ed25519 public key (64 hex digits).",
)
@click.option(
    "--world-size",
    "world_text",
    default="1",
    show_default=True,
    metavar="N|from-env",
    help="Spread each step's micro-batches over N processes here (a power of two <= micro_batches), "
    "or join torchrun's group across machines (from-env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON document on stdout instead of lines; progress within each step as JSON lines on stderr.",
)
@click.option("--attest", is_flag=True, help="Sign each step's result with the node key into the node's ledger.")
@click.option(
    "--ledger",
    "ledger_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Ledger file for --attest (default: $P2PAUDIT_HOME/ledger.db).",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Cache of verified files of remote runs (default: $P2PAUDIT_HOME/cache).",
)
@cache_size_option("the cache")
@silence_option("--timeout", "a remote server")
@allow_other_hosts_option
@click.option(
    "--ignore-memory-check", is_flag=True, help="Replay even if the estimated memory exceeds what is available."
)
@click.option(
    "--replay",
    "replay_mode",
    type=click.Choice(["auto", "in-memory", "streaming"]),
    default="auto",
    show_default=True,
    help="in-memory holds whole states (and bisects a mismatch's trace); streaming holds the parameters, one "
    "gradient set and one micro-batch's activations; auto streams when in-memory would not fit.",
)
@click.option(
    "--scratch-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where a streaming replay keeps partial sums and intermediate states (default: $P2PAUDIT_HOME/scratch).",
)
@click.option(
    "--run-lab-code",
    is_flag=True,
    help="Replay a lab run (train-script's) fetched from a URL: RUNS THE PUBLISHER'S SCRIPT (Python) here. "
    "Refused without it; pin the lab with --publisher.",
)
def verify_range_cmd(
    steps: str,
    run_dir: str,
    backend: str,
    against: str | None,
    publisher: str | None,
    world_text: str,
    as_json: bool,
    attest: bool,
    ledger_path: Path | None,
    cache_dir: Path | None,
    cache_size: int,
    timeout: float,
    allow_other_hosts: bool,
    ignore_memory_check: bool,
    replay_mode: str,
    scratch_dir: Path | None,
    run_lab_code: bool,
) -> None:
    """Replay steps A-B (inclusive; or one step "A") of the run in --run and compare every digest.

    Steps are 0-based: step n turns state n into state n+1, and the digest
    printed for step n is state n+1. "init" checks state 0 alone against the
    recipe (config, seed); a range that includes step 0 checks it too. A step
    matches when its input's step counter, its data, its output state and its
    loss all equal the claim. Exit 0 when every check matches, 1 when any
    does not, 2 on bad usage or unreadable input, 3 on the verifier's own failure.
    With --world-size from-env (under torchrun, see docs/engine.md) rank 0
    prints and exits with the verdict; the other ranks exit 0 silently unless they fail.
    A lab run (train-script's, docs/lab-mode.md) replays under the lab mode,
    running its signed script: replay only a publisher you would let run code
    (one behind a URL only with --run-lab-code).
    """
    replay = ReplayOptions(ignore_memory_check, replay_mode, scratch_dir, run_lab_code)
    world_size = _world_size(world_text)  # refused before anything of a remote run is fetched
    if _is_local_lab_run(run_dir):
        _verify_lab(Path(run_dir), steps, as_json, against, publisher, world_size, attest, ledger_path)
        return
    local = _local_run_dir(run_dir, steps, cache_dir, cache_size, timeout, replay, publisher, allow_other_hosts)
    with local as (local_dir, partial_data, lab):
        if lab:
            _verify_lab(local_dir, steps, as_json, against, publisher, world_size, attest, ledger_path)
            return
        report = _verify(local_dir, steps, backend, as_json, against, publisher, world_size, replay, partial_data)
        if report is None:  # a rank other than 0 of torchrun's group: rank 0 reports
            return
        if attest:
            _attest(local_dir, report, ledger_path, as_json)
    _fail_unless_all_match(report)


def _verify_lab(
    run_dir: Path,
    steps: str,
    as_json: bool,
    against: str | None,
    publisher: str | None,
    world_size: int | None,
    attest: bool,
    ledger_path: Path | None,
) -> None:
    """verify-range of a lab run (a directory, or a remote run's local view): cli.lab_cmds.verify_lab_range."""
    from p2paudit.cli.lab_cmds import verify_lab_range
    from p2paudit.errors import InputError

    if against is not None:  # never a comparison silently not made
        raise InputError("--against: a lab run replays once, on the backend its manifest names")
    verify_lab_range(run_dir, steps, as_json, publisher, world_size, attest, ledger_path)


def _is_local_lab_run(run: str) -> bool:
    """Whether --run names a directory holding a lab run (its manifest's format says so; run.lab_run)."""
    from p2paudit.run.lab_format import is_lab_run
    from p2paudit.run.remote import is_remote

    return not is_remote(run) and Path(run).is_dir() and is_lab_run(Path(run))


def _fail_unless_all_match(report: RangeReport) -> None:
    """The one way a command exits 1: MismatchError naming how many checks did not match."""
    from p2paudit.errors import MismatchError

    if not report.all_match:
        bad = sum(1 for a in report.audits if a.verdict != "match")
        raise MismatchError(f"{bad} of {len(report.audits)} check(s) did not match the published claim")
