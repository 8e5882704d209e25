"""Witnessing peers' checkpoints after C2SP tlog-witness (protocol /p2paudit/witness/1.0.0), and the client side.

The witness side, `witness_checkpoint(witness, request) -> response`, checks
in the order C2SP tlog-witness gives: the origin names a log it follows
(unknown log), the note carries a valid signature by that log's key (bad
signature), old size <= new size (old size too large), old size equals the
size it last cosigned for the origin (old size mismatch, answered with its
size so the client can retry), the consistency proof from that size (bad
proof; empty from size 0), and same size means same root (root conflict).
Every check and the write of the new state are one write transaction, so two
requests cannot roll the witness back. State, stored before the reply:

- the peer checkpoint row (ledger.peers.insert_checkpoint), so a later note
  of the same size with another root is a split view that
  `Ledger.split_views()` reports with both signed notes;
- the cosignature it gave (ledger.cosignature, kind "given"): the latest
  cosigned size per origin that old sizes are checked against.

A root conflict stores the conflicting note as split-view evidence and is
refused; the caller gossips the pair (`split_view_evidence`).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ledger import EMPTY_ROOT, Checkpoint, Ledger, NoteVerifier, open_checkpoint
from ledger.cosignature import (
    GIVEN,
    RECEIVED,
    Cosignature,
    CosignatureSigner,
    CosignatureVerifier,
    insert_cosignature,
    latest_given,
    verify_cosignature,
)
from ledger.errors import CheckpointError, LedgerError, ProofError
from ledger.merkle import verify_consistency
from ledger.note import parse_note
from ledger.peers import CONSISTENT, FIRST, SPLIT_VIEW, check_storable, insert_checkpoint
from p2paudit.identity import Identity
from p2paudit.node.wire import (
    MAX_PROOF_HASHES,
    WITNESS,
    WITNESS_BAD_PROOF,
    WITNESS_BAD_SIGNATURE,
    WITNESS_MALFORMED,
    WITNESS_OK,
    WITNESS_OLD_SIZE_MISMATCH,
    WITNESS_OLD_SIZE_TOO_LARGE,
    WITNESS_ROOT_CONFLICT,
    WITNESS_UNKNOWN_LOG,
    Evidence,
    PeerRefused,
    WireError,
    WitnessRequest,
    WitnessResponse,
    decode_witness_request,
    decode_witness_response,
    encode_evidence,
    encode_witness_request,
    encode_witness_response,
    origin_public_key,
)

if TYPE_CHECKING:
    from p2paudit.node.net import Node

WITNESS_NAME_PREFIX = "p2paudit.dev/witness/"


class WitnessRefused(PeerRefused):
    """A witness refused a checkpoint; `code` is the WITNESS_* code and `size` its latest size (mismatch)."""

    def __init__(self, message: str, code: int, size: int) -> None:
        super().__init__(message)
        self.code = code
        self.size = size


def witness_signer(identity: Identity, origin: str) -> CosignatureSigner:
    """The node key as a cosigner, named after its own ledger origin's peer id."""
    return CosignatureSigner(WITNESS_NAME_PREFIX + origin.rsplit("/", 1)[-1], identity.private_key)


@dataclass
class Witness:
    """A node acting as witness: its ledger (where state is kept), its cosigning key, and which logs it follows.

    `logs` maps origin -> the log's verifier key; None follows every
    p2paudit node ledger, whose origin names its own key (wire.origin_public_key).
    """

    ledger: Ledger
    signer: CosignatureSigner
    logs: Mapping[str, NoteVerifier] | None = None

    def log_verifier(self, origin: str) -> NoteVerifier | None:
        if self.logs is not None:
            return self.logs.get(origin)
        try:
            return NoteVerifier(origin, origin_public_key(origin))
        except (WireError, CheckpointError):
            return None


def _refuse(code: int, text: str, size: int = 0) -> bytes:
    return encode_witness_response(WitnessResponse(code, size, text))


def witness_checkpoint(witness: Witness, request: bytes, now: int | None = None) -> bytes:
    """Answer one add-checkpoint request: a cosignature line, or a refusal with its distinct code."""
    try:
        decoded = decode_witness_request(request)
        origin = Checkpoint.from_body(parse_note(decoded.note).text).origin
    except (WireError, CheckpointError) as exc:
        return _refuse(WITNESS_MALFORMED, str(exc))
    verifier = witness.log_verifier(origin)
    if verifier is None:
        return _refuse(WITNESS_UNKNOWN_LOG, f"this witness does not follow the log {origin[:100]!r}")
    try:
        cp = open_checkpoint(decoded.note, [verifier])
    except CheckpointError as exc:
        return _refuse(WITNESS_BAD_SIGNATURE, str(exc))
    try:
        check_storable(cp)
    except CheckpointError as exc:
        return _refuse(WITNESS_MALFORMED, str(exc))
    if decoded.old_size > cp.size:
        return _refuse(WITNESS_OLD_SIZE_TOO_LARGE, f"old size {decoded.old_size} is above the checkpoint's {cp.size}")
    if cp.size == 0 and cp.root != EMPTY_ROOT:
        return _refuse(WITNESS_BAD_PROOF, "a checkpoint of size 0 must carry the empty tree's root")
    timestamp = int(time.time()) if now is None else now
    with witness.ledger.transaction() as tx:
        return _check_and_cosign(witness, tx.conn, decoded, cp, verifier, timestamp)


def _check_and_cosign(
    witness: Witness,
    conn: sqlite3.Connection,
    request: WitnessRequest,
    cp: Checkpoint,
    verifier: NoteVerifier,
    timestamp: int,
) -> bytes:
    """The state-dependent checks and the state update, inside the caller's write transaction."""
    now_text = datetime.now(UTC).isoformat(timespec="seconds")
    latest_size, latest_root = latest_given(conn, cp.origin, witness.signer.verifier) or (0, EMPTY_ROOT)
    if request.old_size != latest_size:
        return _refuse(
            WITNESS_OLD_SIZE_MISMATCH,
            f"old size {request.old_size} is not {latest_size}, the size this witness last cosigned",
            latest_size,
        )
    held = conn.execute(
        "SELECT root FROM checkpoints WHERE kind = 'peer' AND vkey = ? AND origin = ? AND size = ?",
        (verifier.vkey, cp.origin, cp.size),
    ).fetchall()
    other_root = (request.old_size == cp.size and cp.root != latest_root) or any(r != cp.root for (r,) in held)
    if other_root:
        if not any(r == cp.root for (r,) in held):
            insert_checkpoint(conn, "peer", SPLIT_VIEW, cp, verifier.vkey, request.note, now_text)
        return _refuse(WITNESS_ROOT_CONFLICT, f"size {cp.size} was cosigned with another root: a split view")
    try:
        if request.old_size == 0 or request.old_size == cp.size:
            if request.proof:
                raise ProofError(f"consistency from size {request.old_size} takes no proof, got {len(request.proof)}")
        else:
            verify_consistency(request.old_size, cp.size, list(request.proof), latest_root, cp.root)
    except ProofError as exc:
        return _refuse(WITNESS_BAD_PROOF, str(exc))
    if not held:
        insert_checkpoint(
            conn, "peer", FIRST if latest_size == 0 else CONSISTENT, cp, verifier.vkey, request.note, now_text
        )
    line = witness.signer.cosign(cp.body(), timestamp)
    cosignature = Cosignature(witness.signer.verifier, timestamp, cp, line)
    insert_cosignature(conn, GIVEN, cosignature, request.note)
    return encode_witness_response(WitnessResponse(WITNESS_OK, 0, line))


def split_view_evidence(ledger: Ledger) -> list[bytes]:
    """Every split view this ledger holds, as evidence messages (two notes of one size with different roots)."""
    found = []
    for view in ledger.split_views():
        notes: dict[bytes, str | None] = dict.fromkeys(view.roots)
        for note in view.notes:
            root = Checkpoint.from_body(parse_note(note).text).root
            if notes.get(root) is None:
                notes[root] = note
        first, second = [note for note in notes.values() if note is not None][:2]
        found.append(encode_evidence(Evidence("split_view", first, second)))
    return found


# -- the client side ------------------------------------------------------------------------------------------


def witness_request(ledger: Ledger, note: str, old_size: int) -> bytes:
    """An add-checkpoint request for this node's own checkpoint `note`, proved from `old_size` (the size the
    witness last cosigned; 0 when unknown, and a mismatch answer says the right one)."""
    cp = Checkpoint.from_body(parse_note(note).text)
    if type(old_size) is not int or not 0 <= old_size <= cp.size:
        raise WireError(f"old size {old_size} is not within 0..{cp.size}")
    proof = ledger.consistency_proof(old_size, cp.size) if 0 < old_size < cp.size else []
    if len(proof) > MAX_PROOF_HASHES:
        raise LedgerError(f"consistency proof has {len(proof)} hashes, more than {MAX_PROOF_HASHES}")
    return encode_witness_request(WitnessRequest(old_size, tuple(proof), note))


def read_witness_response(note: str, response: bytes, cosigner: CosignatureVerifier) -> Cosignature:
    """The verified cosignature on `note` from a witness's answer; WitnessRefused (with code and size) otherwise."""
    decoded = decode_witness_response(response)
    if decoded.code != WITNESS_OK:
        raise WitnessRefused(f"witness refused (code {decoded.code}): {decoded.text[:200]}", decoded.code, decoded.size)
    try:
        return verify_cosignature(note, decoded.text, cosigner)
    except CheckpointError as exc:
        raise WireError(f"witness answer is no valid cosignature: {exc}") from None


def record_cosignature(ledger: Ledger, note: str, cosignature: Cosignature) -> None:
    """Keep a witness's cosignature on this node's checkpoint (shown by `p2paudit ledger checkpoint`)."""
    with ledger.transaction() as tx:
        insert_cosignature(tx.conn, RECEIVED, cosignature, note)


async def ask_cosignature(
    node: Node, peer: str, note: str, request: bytes, cosigner: CosignatureVerifier
) -> Cosignature:
    """The asking end: send `request` (witness_request) to `peer` under WITNESS's limits, and read its
    cosignature of `note` (WitnessRefused with the witness's code; InputError for a bad answer)."""
    return read_witness_response(note, await node.ask(peer, WITNESS, request), cosigner)
