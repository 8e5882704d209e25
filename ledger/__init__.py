"""ledger: an append-only RFC 9162 Merkle log of opaque byte entries in SQLite, with C2SP signed checkpoints.

Independent of the rest of p2paudit. Modules:

    ledger.errors        LedgerError (exit_code 2) and ProofError, AppendOnlyError, CheckpointError, CorruptLedgerError;
                         LedgerInvariantError (exit_code 3: a bug, not the input)
    ledger.database      opening the SQLite file (escaped URI, read-only mode) and one-line SQLite errors
    ledger.merkle        leaf/node hashes, roots, which nodes make a proof, RFC 9162 proof verification (pure)
    ledger.note          C2SP signed notes and tlog checkpoints with Ed25519 keys
    ledger.store         Ledger: the SQLite-backed log (append, proofs, checkpoints, witnessing, verify)
    ledger.peers         peer checkpoint acceptance and split-view evidence
    ledger.verification  full recomputation of a ledger file
    ledger.schema        tables, append-only triggers, magic and version (checked read-only too)
"""

from ledger.errors import (
    AppendOnlyError,
    CheckpointError,
    CorruptLedgerError,
    LedgerError,
    LedgerInvariantError,
    ProofError,
)
from ledger.merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    consistency_path,
    consistency_proof,
    inclusion_path,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)
from ledger.note import Checkpoint, NoteSigner, NoteVerifier, open_checkpoint, open_note, sign_checkpoint, sign_note
from ledger.peers import PeerCheckpointResult, SplitView
from ledger.store import MAX_ENTRY_BYTES, Ledger, Transaction
from ledger.verification import VerifyReport

__all__ = [
    "AppendOnlyError",
    "CheckpointError",
    "CorruptLedgerError",
    "LedgerError",
    "LedgerInvariantError",
    "ProofError",
    "EMPTY_ROOT",
    "HASH_SIZE",
    "consistency_path",
    "consistency_proof",
    "inclusion_path",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root_from_leaf_hashes",
    "verify_consistency",
    "verify_inclusion",
    "Checkpoint",
    "NoteSigner",
    "NoteVerifier",
    "open_checkpoint",
    "open_note",
    "sign_checkpoint",
    "sign_note",
    "PeerCheckpointResult",
    "SplitView",
    "MAX_ENTRY_BYTES",
    "Ledger",
    "Transaction",
    "VerifyReport",
]
