"""`p2paudit ledger ...`: query and maintain the node's attestation ledger.

A thin adapter: parse options, call p2paudit.attest, print text or --json.
The ledger is home_dir()/ledger.db unless --ledger PATH is given.

Commands that only read (coverage, disputes, equivocations, show, proof,
consistency, verify, export, and checkpoint when the latest one is current)
open the ledger read-only, so they work in a read-only home. SQLite's
refusals become one line that says what is wrong (ledger.database).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from p2paudit.cli import cli


def _ledger_option(func: Callable) -> Callable:
    return click.option(
        "--ledger",
        "ledger_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Ledger file (default: $P2PAUDIT_HOME/ledger.db).",
    )(func)


def _json_option(func: Callable) -> Callable:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(func)


def _path(ledger_path: Path | None) -> Path:
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
def _open_existing(ledger_path: Path | None):
    """The existing ledger, opened read-only: nothing is created or written."""
    from p2paudit.attest.store import AttestationStore

    path = _path(ledger_path)
    with _sqlite_errors(path, "answer the query"), AttestationStore.open_readonly(path) as store:
        yield store


@contextmanager
def _open_for_writing(ledger_path: Path | None):
    """The existing ledger, opened for writing; refused (nothing created) when there is none."""
    from p2paudit.attest.store import AttestationStore

    path = _path(ledger_path)
    with _sqlite_errors(path, "store it"), AttestationStore.open(path) as store:
        yield store


@contextmanager
def _open_or_create(ledger_path: Path | None):
    """Open the ledger, creating it under the node's own origin (which needs `p2paudit init`)."""
    from p2paudit.attest.store import AttestationStore, origin_for, read_origin
    from p2paudit.identity import load_node_identity

    path = _path(ledger_path)
    origin = None if read_origin(path) is not None else origin_for(load_node_identity().public_key)
    with _sqlite_errors(path, "store it"), AttestationStore.open(path, origin) as store:
        yield store


def _echo_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2))


def _pick_run(store, run: str | None) -> bytes:
    from p2paudit.attest.report import parse_run_id
    from p2paudit.errors import InputError

    if run is not None:
        return parse_run_id(run)
    runs = store.runs()
    if len(runs) != 1:
        raise InputError(f"the ledger knows {len(runs)} runs; name one with --run RUN_ID")
    return runs[0].run_id


@cli.group()
def ledger() -> None:
    """The attestation ledger: coverage, disputes, proofs, checkpoints."""


@ledger.command("add-run")
@click.argument("run_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--id", "run_hex", default=None, help="Run id (hex) when no run directory is given.")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Number of steps, with --id.")
@click.option("--label", default=None, help="A name for the run.")
@_ledger_option
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
    elif run_hex is None or steps is None:
        raise InputError("give RUN_DIR, or both --id and --steps")
    else:
        run_id = parse_run_id(run_hex)
    with _open_or_create(ledger_path) as store:
        info = store.register_run(run_id, steps, label or "")
    click.echo(f"run {info.run_id.hex()} known: {info.steps} steps{f' ({info.label})' if info.label else ''}")


@ledger.command()
@click.option("--run", "run", default=None, help="Run id (hex); needed when the ledger knows several runs.")
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
    default=1,
    show_default=True,
    help="R: report steps checked by at least R distinct keys.",
)
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write a coverage plot.")
@_json_option
@_ledger_option
def coverage(
    run: str | None, trusted: Path | None, min_count: int, png: Path | None, as_json: bool, ledger_path: Path | None
) -> None:
    """Per step, how many distinct keys attested a match, a mismatch, an error."""
    from p2paudit.attest import queries, report

    trusted_keys = queries.load_trusted_keys(trusted) if trusted is not None else None
    with _open_existing(ledger_path) as store:
        run_id = _pick_run(store, run)
        everyone = queries.coverage(store, run_id, None, min_count)
        chosen = queries.coverage(store, run_id, trusted_keys, min_count) if trusted_keys is not None else None
        if png is not None:  # the explorer's aggregation: readable at 100,000 steps
            from p2paudit.cli.coverage_png import write_coverage_png

            write_coverage_png(png, store, run_id, trusted_keys, min_count)
    tables = [everyone] + ([chosen] if chosen is not None else [])
    if as_json:
        _echo_json(
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
    if trusted_keys is None:
        click.echo("no --trusted file: every figure above counts untrusted keys")
    click.echo("step  checked  match  mismatch  error   (all keys)")
    for item in everyone.per_step:
        click.echo(f"{item.step:>4}  {item.checked:>7}  {item.match:>5}  {item.mismatch:>8}  {item.error:>5}")


def _evidence_lines(side) -> str:
    first = side[0]
    observed = first.observed.hex()[:16] + "..." if first.observed else "none"
    signers = ", ".join(f"{item.verifier.hex()[:16]}... (index {item.index})" for item in side)
    return f"  {first.verdict} observed {observed} by {signers}"


@ledger.command()
@click.option("--run", "run", default=None, help="Only this run (hex id).")
@_json_option
@_ledger_option
def disputes(run: str | None, as_json: bool, ledger_path: Path | None) -> None:
    """Steps on which different keys signed different outcomes, with the signed evidence."""
    from p2paudit.attest import queries, report

    with _open_existing(ledger_path) as store:
        found = queries.disputes(store, report.parse_run_id(run) if run is not None else None)
    if as_json:
        _echo_json([report.dispute_dict(item) for item in found])
        return
    click.echo(f"{len(found)} disputed steps")
    for item in found:
        click.echo(f"run {item.run_id.hex()[:16]}... step {item.step}: {len(item.sides)} outcomes")
        for side in item.sides:
            click.echo(_evidence_lines(side))


@ledger.command()
@_json_option
@_ledger_option
def equivocations(as_json: bool, ledger_path: Path | None) -> None:
    """Keys that signed two results for one step, and tree heads of one size with two roots."""
    from p2paudit.attest import queries, report

    with _open_existing(ledger_path) as store:
        found = queries.equivocations(store)
    if as_json:
        _echo_json(report.equivocations_dict(found))
        return
    click.echo(f"{len(found.keys)} key equivocations, {len(found.tree_heads)} tree-head split views")
    for item in found.keys:
        indices = ", ".join(str(e.index) for e in item.evidence)
        click.echo(
            f"key {item.verifier.hex()[:16]}... run {item.run_id.hex()[:16]}... step {item.step}: "
            f"{len(item.evidence)} signed entries (indices {indices})"
        )
    for view in found.tree_heads:
        click.echo(
            f"log {view.origin} key {view.vkey.split('+')[0]}: size {view.size} signed with {len(view.roots)} roots"
        )


@ledger.command()
@click.option("--step", type=click.IntRange(min=0), required=True)
@click.option("--run", "run", default=None, help="Run id (hex); needed when the ledger knows several runs.")
@_json_option
@_ledger_option
def show(step: int, run: str | None, as_json: bool, ledger_path: Path | None) -> None:
    """Every attestation stored for one step."""
    from p2paudit.attest.record import attestation_to_dict
    from p2paudit.errors import InputError

    with _open_existing(ledger_path) as store:
        run_id = _pick_run(store, run)
        info = store.run_info(run_id)
        if step >= info.steps:
            raise InputError(
                f"step {step} is not in run {run_id.hex()[:16]}..., which has {info.steps} steps (0..{info.steps - 1})"
            )
        found = store.step_attestations(run_id, step)
    if as_json:
        _echo_json([{"index": index, **attestation_to_dict(s.attestation)} for index, s in found])
        return
    click.echo(f"run {run_id.hex()} step {step}: {len(found)} attestations")
    for index, signed in found:
        a = signed.attestation
        observed = a.observed_output_digest.hex()[:16] + "..." if a.observed_output_digest else "none"
        click.echo(
            f"  [{index}] {a.verdict:<8} observed {observed} by {a.verifier.hex()[:16]}... "
            f"{a.backend} on {a.hardware or '?'} at {a.time_ms} ms"
        )


@ledger.command()
@click.option("--index", "index", type=click.IntRange(min=0), required=True, help="Entry index.")
@click.option("--size", type=click.IntRange(min=1), default=None, help="Tree size (default: the current size).")
@_json_option
@_ledger_option
def proof(index: int, size: int | None, as_json: bool, ledger_path: Path | None) -> None:
    """The RFC 9162 inclusion proof of one entry (checked before it is printed)."""
    from ledger import ProofError, leaf_hash, verify_inclusion

    with _open_existing(ledger_path) as store:
        size = store.ledger.size if size is None else size
        hashes = store.ledger.inclusion_proof(index, size)
        root, leaf = store.ledger.root(size), leaf_hash(store.ledger.entry(index))
        try:
            verify_inclusion(leaf, index, size, hashes, root)
        except ProofError as exc:
            _own_proof_failed(store, exc)
    if as_json:
        _echo_json(
            {
                "index": index,
                "size": size,
                "leaf_hash": leaf.hex(),
                "root": root.hex(),
                "proof": [h.hex() for h in hashes],
            }
        )
        return
    click.echo(f"entry {index} in tree of size {size}\nleaf hash {leaf.hex()}\nroot      {root.hex()}")
    for number, item in enumerate(hashes):
        click.echo(f"proof[{number}] {item.hex()}")


def _own_proof_failed(store, exc: Exception) -> None:
    """A proof the ledger just made does not verify: a corrupt file (exit 2) if verify finds one, else our bug (3)."""
    from ledger import CorruptLedgerError
    from p2paudit.errors import InternalError

    found = store.ledger.verify()
    if not found.ok:
        raise CorruptLedgerError(
            f"the ledger's own proof does not verify ({exc}): the file is corrupt, "
            f"first bad index {found.first_bad_index}: {found.problems[0]}",
            found.first_bad_index,
        )
    raise InternalError(f"the ledger's own proof does not verify although the ledger does: {exc}")


@ledger.command()
@click.argument("old_size", type=click.IntRange(min=0))
@click.argument("new_size", type=click.IntRange(min=0))
@_json_option
@_ledger_option
def consistency(old_size: int, new_size: int, as_json: bool, ledger_path: Path | None) -> None:
    """The RFC 9162 proof that the tree of OLD_SIZE entries is a prefix of the tree of NEW_SIZE."""
    from ledger import ProofError, verify_consistency

    with _open_existing(ledger_path) as store:
        hashes = store.ledger.consistency_proof(old_size, new_size)
        old_root, new_root = store.ledger.root(old_size), store.ledger.root(new_size)
        try:
            verify_consistency(old_size, new_size, hashes, old_root, new_root)
        except ProofError as exc:
            _own_proof_failed(store, exc)
    if as_json:
        _echo_json(
            {
                "old_size": old_size,
                "new_size": new_size,
                "old_root": old_root.hex(),
                "new_root": new_root.hex(),
                "proof": [h.hex() for h in hashes],
            }
        )
        return
    click.echo(f"size {old_size} root {old_root.hex()}\nsize {new_size} root {new_root.hex()}")
    for number, item in enumerate(hashes):
        click.echo(f"proof[{number}] {item.hex()}")


@ledger.command()
@_ledger_option
def checkpoint(ledger_path: Path | None) -> None:
    """Print a checkpoint of the current tree head signed by the node key (a C2SP note), signing one if needed.

    When the latest checkpoint this node signed is of the current size, it is
    printed as it is, without opening the ledger for writing.
    """
    from p2paudit.identity import load_node_identity

    identity = load_node_identity()
    if _path(ledger_path).exists():
        with _open_existing(ledger_path) as store:
            note = _current_checkpoint(store, identity)
            if note is not None:
                click.echo(_with_cosignatures(store, note), nl=False)
                return
    with _open_or_create(ledger_path) as store:
        note = store.checkpoint(identity)
    click.echo(note, nl=False)


def _with_cosignatures(store, note: str) -> str:
    """The note with the C2SP cosignature lines peers returned for exactly this checkpoint (witnessing)."""
    from ledger import Checkpoint
    from ledger.cosignature import read_cosignatures
    from ledger.note import parse_note

    cp = Checkpoint.from_body(parse_note(note).text)
    lines, seen = [], set()
    for item in read_cosignatures(store.conn, "received", cp.origin):
        if (item.size, item.root) == (cp.size, cp.root) and item.cosigner not in seen:
            seen.add(item.cosigner)
            lines.append(item.line if item.line.endswith("\n") else item.line + "\n")
    return note + "".join(lines)


def _current_checkpoint(store, identity) -> str | None:
    """The latest own checkpoint if this key signed it at the current size and root, else None."""
    from ledger import CheckpointError, NoteSigner, open_checkpoint

    note = store.ledger.latest_checkpoint()
    if note is None:
        return None
    try:
        cp = open_checkpoint(note, [NoteSigner(store.ledger.origin, identity.private_key).verifier])
    except CheckpointError:  # signed by another key (the node key changed): sign a new one
        return None
    size = store.ledger.size
    return note if (cp.size, cp.root) == (size, store.ledger.root(size)) else None


@ledger.command()
@_json_option
@_ledger_option
def verify(as_json: bool, ledger_path: Path | None) -> None:
    """Recompute the tree, every signature and the index; exit 1 naming the first bad index."""
    from p2paudit.attest.verification import verify_store
    from p2paudit.errors import MismatchError

    with _open_existing(ledger_path) as store:
        found = verify_store(store)
    if as_json:
        _echo_json(
            {
                "ok": found.ok,
                "size": found.size,
                "root": found.root.hex() if found.root else None,
                "first_bad_index": found.first_bad_index,
                "problems": list(found.problems),
                "attestations_checked": found.attestations_checked,
            }
        )
    if not found.ok:
        where = f"first bad index {found.first_bad_index}: " if found.first_bad_index is not None else ""
        raise MismatchError(f"ledger does not verify: {where}{found.first_problem()}")
    if not as_json:
        click.echo(
            f"ok: {found.size} entries, {found.attestations_checked} signed attestations, "
            f"root {found.root.hex() if found.root else '-'}"
        )


MAX_IMPORT_BYTES = 64 * 1024  # = attest.intoto.MAX_ENVELOPE_SIZE; a signed attestation is far smaller


@ledger.command("import")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@_ledger_option
def import_(file: Path, ledger_path: Path | None) -> None:
    """Verify and store a signed attestation (msgpack) or a DSSE envelope (JSON).

    FILE must be a regular file (not a symlink, FIFO or device) of at most
    MAX_IMPORT_BYTES (64 KiB, the DSSE envelope limit). The ledger must exist
    and know the run (`ledger add-run`): nothing is created when the input is refused.
    """
    from p2paudit.attest.intoto import import_dsse
    from p2paudit.errors import InputError
    from p2paudit.regular_files import read_regular

    data = read_regular(file, "attestation file", MAX_IMPORT_BYTES)
    # JSON starts with '{' (maybe after whitespace); a signed attestation is a msgpack array (0x93).
    envelope = import_dsse(data) if data.lstrip()[:1] == b"{" else None
    path = _path(ledger_path)
    if not path.exists():
        raise InputError(f"no ledger at {path}: make the run known first (p2paudit ledger add-run)")
    with _open_for_writing(ledger_path) as store:
        outcome = store.append(envelope.signed.encoded if envelope is not None else data)
    if envelope is not None:
        signers = ", ".join(key.hex()[:16] + "..." for key in envelope.envelope_signers)
        click.echo(f"DSSE envelope signed by {signers}")
    conflict = f" ({outcome.conflict} with stored attestations)" if outcome.conflict else ""
    click.echo(f"{'stored' if outcome.new else 'already stored'} at index {outcome.index}{conflict}")


@ledger.command()
@click.option("--index", "index", type=click.IntRange(min=0), required=True, help="Entry index.")
@click.option(
    "--dsse",
    is_flag=True,
    help="An in-toto statement in a DSSE envelope signed by this node (default: the raw signed attestation bytes).",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this file (default: stdout).",
)
@_ledger_option
def export(index: int, dsse: bool, output: Path | None, ledger_path: Path | None) -> None:
    """Export one stored attestation."""
    with _open_existing(ledger_path) as store:
        signed = store.attestation(index)
    if dsse:
        from p2paudit.attest.intoto import export_dsse
        from p2paudit.identity import load_node_identity

        data = export_dsse(signed, load_node_identity()).encode()
    else:
        data = signed.encoded
    if output is not None:
        output.write_bytes(data)
    else:
        click.echo(data, nl=False)  # bytes go to the binary stream untouched
