"""`p2paudit ledger proof | consistency | checkpoint | verify | import | export`: the log itself.

Proofs are checked before they are printed; checkpoints are signed by the
node key only when the latest is not current; import verifies before it
stores; export writes the exact signed bytes (or a DSSE envelope). The group
and the shared options and openers are in ledger_cmds.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from p2paudit.cli.ledger_cmds import (
    echo_json,
    json_option,
    ledger,
    ledger_file,
    ledger_option,
    open_existing,
    open_for_writing,
    open_or_create,
)

if TYPE_CHECKING:
    from p2paudit.attest.store import AttestationStore
    from p2paudit.identity import Identity


@ledger.command()
@click.option("--index", "index", type=click.IntRange(min=0), required=True, help="Entry index.")
@click.option("--size", type=click.IntRange(min=1), default=None, help="Tree size (default: the current size).")
@json_option
@ledger_option
def proof(index: int, size: int | None, as_json: bool, ledger_path: Path | None) -> None:
    """The RFC 9162 inclusion proof of one entry (checked before it is printed)."""
    from ledger import ProofError, leaf_hash, verify_inclusion

    with open_existing(ledger_path) as store:
        size = store.ledger.size if size is None else size
        hashes = store.ledger.inclusion_proof(index, size)
        root, leaf = store.ledger.root(size), leaf_hash(store.ledger.entry(index))
        try:
            verify_inclusion(leaf, index, size, hashes, root)
        except ProofError as exc:
            _own_proof_failed(store, exc)
    if as_json:
        echo_json(
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


def _own_proof_failed(store: AttestationStore, exc: Exception) -> None:
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
@json_option
@ledger_option
def consistency(old_size: int, new_size: int, as_json: bool, ledger_path: Path | None) -> None:
    """The RFC 9162 proof that the tree of OLD_SIZE entries is a prefix of the tree of NEW_SIZE."""
    from ledger import ProofError, verify_consistency

    with open_existing(ledger_path) as store:
        hashes = store.ledger.consistency_proof(old_size, new_size)
        old_root, new_root = store.ledger.root(old_size), store.ledger.root(new_size)
        try:
            verify_consistency(old_size, new_size, hashes, old_root, new_root)
        except ProofError as exc:
            _own_proof_failed(store, exc)
    if as_json:
        echo_json(
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
@ledger_option
def checkpoint(ledger_path: Path | None) -> None:
    """Print a checkpoint of the current tree head signed by the node key (a C2SP note), signing one if needed.

    When the latest checkpoint this node signed is of the current size, it is
    printed as it is, without opening the ledger for writing.
    """
    from p2paudit.identity import load_node_identity

    identity = load_node_identity()
    if ledger_file(ledger_path).exists():
        with open_existing(ledger_path) as store:
            note = _current_checkpoint(store, identity)
            if note is not None:
                click.echo(_with_cosignatures(store, note), nl=False)
                return
    with open_or_create(ledger_path) as store:
        note = store.checkpoint(identity)
    click.echo(note, nl=False)


def _with_cosignatures(store: AttestationStore, note: str) -> str:
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


def _current_checkpoint(store: AttestationStore, identity: Identity) -> str | None:
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
@json_option
@ledger_option
def verify(as_json: bool, ledger_path: Path | None) -> None:
    """Recompute the tree, every signature and the index; exit 1 naming the first bad index."""
    from p2paudit.attest.verification import verify_store
    from p2paudit.errors import MismatchError

    with open_existing(ledger_path) as store:
        found = verify_store(store)
    if as_json:
        echo_json(
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
@ledger_option
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
    path = ledger_file(ledger_path)
    if not path.exists():
        raise InputError(f"no ledger at {path}: make the run known first (p2paudit ledger add-run)")
    with open_for_writing(ledger_path) as store:
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
@ledger_option
def export(index: int, dsse: bool, output: Path | None, ledger_path: Path | None) -> None:
    """Export one stored attestation."""
    with open_existing(ledger_path) as store:
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
