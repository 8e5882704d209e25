"""The node key, and audits as verify-range prints and signs them: shared by the engine's and the lab's
verify-range and by every command that signs with the node key (train, daemon, announce, train-script)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # heavy imports stay inside the functions
    from p2paudit.audit.records import StepAudit
    from p2paudit.identity import Identity


def digest_text(digest: bytes | None) -> str:
    return "-" if digest is None else "sha256:" + digest.hex()


def node_identity() -> Identity:
    """The node key, created (and said so, on stderr) when this node has none yet."""
    from p2paudit.identity import ensure_node_identity, node_key_path, peer_id_of

    identity, created = ensure_node_identity()
    if created:
        click.echo(
            f"created node key {node_key_path()} (mode 0600), public key {identity.public_key.hex()}, "
            f"peer id {peer_id_of(identity.public_key)}",
            err=True,
        )
    return identity


def audit_line(audit: StepAudit) -> str:
    """One line per audit; the digest shown is the state the step produced (state n + 1), or the rebuilt state 0."""
    digest = digest_text(audit.observed_digest)
    what = "init  " if audit.subject == "init" else f"step {audit.step:>6}"
    line = f"{what:<11}  {audit.verdict:<8}  {digest:<71}  {audit.seconds:7.2f}s"
    return line + (f"  {audit.note}" if audit.note else "")


def record_in_ledger(
    run_id: bytes,
    num_steps: int,
    publisher: bytes,
    label: str,
    audits: Sequence[StepAudit],
    ledger_path: Path | None,
    as_json: bool,
) -> None:
    """Sign the audits of a checked run (its id, step count and publisher key) into the ledger; print where."""
    from p2paudit.attest.recording import record_audits
    from p2paudit.attest.store import AttestationStore, read_origin
    from p2paudit.attest.tables import origin_for
    from p2paudit.identity import home_dir

    identity = node_identity()
    path = ledger_path if ledger_path is not None else home_dir() / "ledger.db"
    origin = None if read_origin(path) is not None else origin_for(identity.public_key)
    with AttestationStore.open(path, origin) as store:
        done = record_audits(store, identity, run_id, num_steps, label, audits, None, publisher)
        size = store.ledger.size
    if as_json:
        return
    where = f"entries {done.first}-{max(done.indices)}" if done.indices else "no entries"
    click.echo(f"attested {len(done.indices)} check(s) in ledger {path} ({where}, {done.new} new, tree size {size})")
    for step, kind in done.conflicts:
        click.echo(f"step {step}: this attestation is part of a {kind}; see `p2paudit ledger {kind}s`")
