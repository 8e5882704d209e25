"""Inclusion proofs as files: made from a ledger, checked offline from the values alone.

A proof file is JSON, a superset of what `p2paudit ledger proof --json` prints:

    {"format": "p2paudit-inclusion-proof", "version": 1, "origin": str,
     "index": int, "size": int, "leaf_hash": hex, "root": hex, "proof": [hex, ...],
     "entry": base64 | null,        the entry's bytes (a signed attestation), so its leaf hash is recomputed
     "checkpoint": str | null,      a signed checkpoint note of exactly this size and root, when the ledger holds one
     "vkey": str | null}            the note's verifier key (C2SP "name+id+base64")

`p2paudit ledger check-proof FILE [--key HEX]` runs `check_proof`: the leaf
hash of the entry, the RFC 9162 proof against the root, and the checkpoint's
size, root and signature. The file is the adversary's to write, so nothing in
it names a signer: the key checked is the one given (--key) or the one a
p2paudit origin names ("p2paudit.dev/ledger/<peer id>" carries the key), and
only a signature line for the checkpoint's own origin by that key counts.
With neither, the signature is not checked, and the result says so.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from ledger import Checkpoint, CheckpointError, NoteVerifier, ProofError, leaf_hash, verify_inclusion
from ledger.note import Note, parse_note
from p2paudit.attest.store import AttestationStore
from p2paudit.errors import InputError, MismatchError
from p2paudit.node.wire import WireError, origin_public_key

FORMAT = "p2paudit-inclusion-proof"
VERSION = 1
ORIGIN_PREFIX = "p2paudit.dev/ledger/"


def _checkpoint_covering(store: AttestationStore, index: int) -> tuple[int, str, str] | None:
    """(size, note, vkey) of the smallest own checkpoint that includes entry `index`, if any."""
    row = store.conn.execute(
        "SELECT size, note, vkey FROM checkpoints WHERE kind = 'own' AND size > ? ORDER BY size ASC, id ASC LIMIT 1",
        (index,),
    ).fetchone()
    if row is None:
        return None
    size, note, vkey = row  # INTEGER, TEXT, TEXT, each NOT NULL (ledger.schema)
    return size, note, vkey


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
    """What a proof file was found to show, and no more."""

    index: int
    size: int
    root: bytes
    entry_checked: bool  # the entry's bytes came with it and hash to its leaf hash
    origin: str | None  # the origin line of the file's checkpoint; None when the file holds none
    signer_key: bytes | None  # the key whose signature for `origin` verified; None when none was checked
    key_given: bool  # signer_key is the key given (--key), not the one the origin names
    unchecked_signatures: int  # the checkpoint's other signature lines (other names or keys, cosignatures): unread

    @property
    def signed_by(self) -> str | None:
        """The origin whose key's signature was verified, or None when no signature was (unsigned, or unchecked)."""
        return self.origin if self.signer_key is not None else None


def _hex(value: object, what: str, length: int = 32) -> bytes:
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


def origin_key(origin: str) -> bytes | None:
    """The key a p2paudit origin names ("p2paudit.dev/ledger/<peer id>" carries the key); None for another log's.

    An origin in the p2paudit form that names no key (not the canonical form of
    an Ed25519 peer id) is a MismatchError: it would read as a node's log.
    """
    if not origin.startswith(ORIGIN_PREFIX):
        return None
    try:
        return origin_public_key(origin)
    except WireError as exc:
        raise MismatchError(f"checkpoint {exc}") from None


@dataclass(frozen=True)
class _Signed:
    origin: str | None
    key: bytes | None
    key_given: bool
    unchecked: int


def _parse_checkpoint(note: object) -> tuple[Note, Checkpoint]:
    if not isinstance(note, str):
        raise InputError(f"proof file: checkpoint is {type(note).__name__}, want a signed note (text)")
    try:
        parsed = parse_note(note)
        return parsed, Checkpoint.from_body(parsed.text)
    except CheckpointError as exc:
        raise InputError(f"proof file: checkpoint is not a signed checkpoint note: {exc}") from None


def _check_checkpoint(data: dict[str, Any], size: int, root: bytes, key: bytes | None) -> _Signed:
    """Which key signed the checkpoint for the origin it names; the file's own "vkey" is never trusted.

    The key checked is `key` (--key) or, without one, the key a p2paudit origin
    names. A signature counts only when its line names the checkpoint's origin
    and that key's id and verifies: a line for another name (a witness's
    cosignature, another log) or another key is read as nothing.
    """
    note = data.get("checkpoint")
    if note is None:
        if key is not None:
            raise MismatchError("proof file holds no signed checkpoint, so nothing is signed by the key given")
        return _Signed(None, None, False, 0)
    parsed, cp = _parse_checkpoint(note)
    origin = cp.origin
    if data.get("origin") is not None and data["origin"] != origin:
        raise MismatchError(f"proof file names origin {str(data['origin'])[:80]!r}, its checkpoint {origin[:80]!r}")
    if (cp.size, cp.root) != (size, root):
        raise MismatchError(f"checkpoint is of size {cp.size} root {cp.root.hex()[:16]}.., the proof of size {size}")
    named = origin_key(origin)
    if key is not None and named is not None and named != key:
        raise MismatchError(f"checkpoint origin {origin[:80]!r} names key {named.hex()[:16]}.., not the key given")
    checked = key if key is not None else named
    if checked is None:
        return _Signed(origin, None, False, len(parsed.signatures))
    try:
        verifier = NoteVerifier(origin, checked)
    except CheckpointError:  # an origin with a space or '+' is no key name: nothing can be signed for it
        raise MismatchError(f"checkpoint origin {origin[:80]!r} is not a key name, so no signature is for it") from None
    own = [sig for sig in parsed.signatures if (sig.name, sig.key_id) == (origin, verifier.key_id)]
    if not own:
        names = ", ".join(sorted({sig.name[:60] for sig in parsed.signatures}))  # up to 100 lines: cut below
        raise MismatchError(
            f"the checkpoint has no signature by key {checked.hex()[:16]}.. for its origin {origin[:80]!r} "
            f"(its {len(parsed.signatures)} signature line(s) name {names[:200]})"
        )
    body = parsed.text.encode("utf-8")
    if not all(verifier.verify(body, sig.signature) for sig in own):
        raise MismatchError(
            f"the checkpoint's signature by key {checked.hex()[:16]}.. for {origin[:80]!r} does not verify"
        )
    return _Signed(origin, checked, key is not None, len(parsed.signatures) - len(own))


def check_proof(data: object, key: bytes | None = None) -> ProofCheck:
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
    signed = _check_checkpoint(data, size, root, key)
    return ProofCheck(index, size, root, entry_checked, signed.origin, signed.key, signed.key_given, signed.unchecked)
