"""Inclusion proofs as files: made from a ledger, checked offline from the values alone.

A proof file is JSON, a superset of what `p2paudit ledger proof --json` prints:

    {"format": "p2paudit-inclusion-proof", "version": 1, "origin": str,
     "index": int, "size": int, "leaf_hash": hex, "root": hex, "proof": [hex, ...],
     "entry": base64 | null,        the entry's bytes (a signed attestation), so its leaf hash is recomputed
     "checkpoint": str | null,      a signed checkpoint note of exactly this size and root, when the ledger holds one
     "vkey": str | null}            the note's verifier key (C2SP "name+id+base64")

`p2paudit ledger check-proof FILE [--key HEX]` runs `check_proof`: the leaf
hash of the entry, the RFC 9162 proof against the root, and the checkpoint's
signature, size and root; a checkpoint signed under the p2paudit origin form
must name the key that signed it (the origin carries the key's peer id).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from ledger import CheckpointError, NoteVerifier, ProofError, leaf_hash, open_checkpoint, verify_inclusion
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.errors import InputError, MismatchError

FORMAT = "p2paudit-inclusion-proof"
VERSION = 1
ORIGIN_PREFIX = "p2paudit.dev/ledger/"


def _checkpoint_covering(store: AttestationStore, index: int) -> tuple[int, str, str] | None:
    """(size, note, vkey) of the smallest own checkpoint that includes entry `index`, if any."""
    return store.conn.execute(
        "SELECT size, note, vkey FROM checkpoints WHERE kind = 'own' AND size > ? ORDER BY size ASC, id ASC LIMIT 1",
        (index,),
    ).fetchone()


def build_proof(store: AttestationStore, index: int) -> dict[str, Any]:
    """The proof file of entry `index`: against the smallest signed checkpoint including it, else the current head."""
    size = store.ledger.size
    if not 0 <= index < size:
        raise InputError(f"entry {index} is not in the ledger of size {size}")
    covering = _checkpoint_covering(store, index)
    proof_size, note, vkey = covering if covering is not None else (size, None, None)
    entry = store.ledger.entry(index)
    return {
        "format": FORMAT,
        "version": VERSION,
        "origin": store.ledger.origin,
        "index": index,
        "size": proof_size,
        "leaf_hash": leaf_hash(entry).hex(),
        "root": store.ledger.root(proof_size).hex(),
        "proof": [h.hex() for h in store.ledger.inclusion_proof(index, proof_size)],
        "entry": base64.b64encode(entry).decode("ascii"),
        "checkpoint": note,
        "vkey": vkey,
    }


@dataclass(frozen=True)
class ProofCheck:
    """What a proof file was found to show."""

    index: int
    size: int
    root: bytes
    entry_checked: bool  # the entry's bytes came with it and hash to its leaf hash
    signed_by: str | None  # the checkpoint's signer (origin), None when the root is not signed


def _hex(value: Any, what: str, length: int = 32) -> bytes:
    try:
        raw = bytes.fromhex(value) if isinstance(value, str) else None
    except ValueError:
        raw = None
    if raw is None or len(raw) != length:
        raise InputError(f"proof file: {what} is not {length * 2} hex digits")
    return raw


def _int(data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    if type(value) is not int or value < 0:
        raise InputError(f"proof file: {name} is {value!r}, want an integer >= 0")
    return value


def _entry_hash(data: dict[str, Any], claimed: bytes) -> bool:
    if data.get("entry") is None:
        return False
    try:
        entry = base64.b64decode(str(data["entry"]), validate=True)
    except (binascii.Error, ValueError):
        raise InputError("proof file: entry is not base64") from None
    if leaf_hash(entry) != claimed:
        raise MismatchError(f"proof file: the entry hashes to {leaf_hash(entry).hex()[:16]}.., not its leaf hash")
    return True


def _check_checkpoint(data: dict[str, Any], size: int, root: bytes, key: bytes | None) -> str | None:
    note = data.get("checkpoint")
    if note is None:
        if key is not None:
            raise MismatchError("proof file holds no signed checkpoint, so nothing is signed by the key given")
        return None
    try:
        verifier = NoteVerifier.from_vkey(str(data.get("vkey")))
        if key is not None and verifier.public_key != key:
            raise MismatchError(
                f"the checkpoint is signed by key {verifier.public_key.hex()[:16]}.., not the key given"
            )
        if verifier.name.startswith(ORIGIN_PREFIX) and verifier.name != origin_for(verifier.public_key):
            raise MismatchError(f"checkpoint origin {verifier.name[:80]!r} does not name the key that signed it")
        cp = open_checkpoint(str(note), verifier)
    except CheckpointError as exc:
        raise MismatchError(f"proof file: checkpoint does not verify: {exc}") from None
    if (cp.size, cp.root) != (size, root):
        raise MismatchError(f"checkpoint is of size {cp.size} root {cp.root.hex()[:16]}.., the proof of size {size}")
    return cp.origin


def check_proof(data: Any, key: bytes | None = None) -> ProofCheck:
    """Check a proof file's values (InputError if malformed, MismatchError if anything fails to verify)."""
    if not isinstance(data, dict):
        raise InputError("proof file is not a JSON object")
    index, size = _int(data, "index"), _int(data, "size")
    leaf, root = _hex(data.get("leaf_hash"), "leaf_hash"), _hex(data.get("root"), "root")
    hashes = data.get("proof")
    if not isinstance(hashes, list):
        raise InputError("proof file: proof is not a list of hashes")
    proof = [_hex(h, f"proof[{n}]") for n, h in enumerate(hashes)]
    entry_checked = _entry_hash(data, leaf)
    try:
        verify_inclusion(leaf, index, size, proof, root)
    except ProofError as exc:
        raise MismatchError(f"inclusion proof of entry {index} in size {size} does not verify: {exc}") from None
    return ProofCheck(index, size, root, entry_checked, _check_checkpoint(data, size, root, key))
