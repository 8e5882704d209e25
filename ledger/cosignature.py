"""C2SP tlog-cosignature/v1 (Ed25519) cosignatures on checkpoints, and the table that keeps them.

A cosignature is a signed-note signature line "— <name> base64(key id || timestamp || signature)":

    key id     = SHA-256(name || 0x0A || 0x04 || 32-byte Ed25519 public key)[:4]
    timestamp  = u64 big-endian POSIX seconds, at most 2^63 - 1
    signature  = Ed25519 over  b"cosignature/v1\\n" || b"time " || decimal(timestamp) || b"\\n" || checkpoint body

The checkpoint body is the whole note text (origin, size, root and any
extension lines, with the final newline, without signature lines). The
statement: as of `timestamp`, the largest consistent tree head the cosigner
has seen for the origin has this root.

The `cosignatures` table (beside the ledger's own, same file) keeps both the
cosignatures a node *gave* as a witness (its record of the latest size it
cosigned per origin, which the witness protocol checks old sizes against) and
those it *received* on its own checkpoints. Append-only, like every ledger table.
"""

from __future__ import annotations

import base64
import hashlib
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger.errors import CheckpointError
from ledger.note import (
    EM_DASH_PREFIX,
    Checkpoint,
    _b64decode_strict,
    check_key_name,
    parse_note,
)

SIG_TYPE_COSIGNATURE_V1 = 0x04
HEADER = b"cosignature/v1\n"
MAX_TIMESTAMP = 2**63 - 1
SIGNATURE_BYTES = 4 + 8 + 64  # key id, timestamp, Ed25519 signature
GIVEN = "given"  # cosigned by this node as a witness
RECEIVED = "received"  # a witness's cosignature on this node's checkpoint

DDL = [
    "CREATE TABLE cosignatures (id INTEGER PRIMARY KEY, kind TEXT NOT NULL CHECK (kind IN ('given', 'received')), "
    "origin TEXT NOT NULL, size INTEGER NOT NULL CHECK (size >= 0), root BLOB NOT NULL CHECK (length(root) = 32), "
    "cosigner TEXT NOT NULL, timestamp INTEGER NOT NULL, line TEXT NOT NULL, note TEXT NOT NULL, "
    "recorded_at TEXT NOT NULL)",
    "CREATE INDEX cosignatures_by_origin ON cosignatures (origin, kind, size)",
    "CREATE TRIGGER cosignatures_no_update BEFORE UPDATE ON cosignatures "
    "BEGIN SELECT RAISE(ABORT, 'ledger table cosignatures is append-only: UPDATE refused'); END",
    "CREATE TRIGGER cosignatures_no_delete BEFORE DELETE ON cosignatures "
    "BEGIN SELECT RAISE(ABORT, 'ledger table cosignatures is append-only: DELETE refused'); END",
]


def cosignature_key_id(name: str, public_key: bytes) -> bytes:
    """SHA-256(name || 0x0A || 0x04 || public key)[:4]: differs from the same key's signed-note key id."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([SIG_TYPE_COSIGNATURE_V1]) + public_key).digest()[:4]


def cosigned_message(body: str, timestamp: int) -> bytes:
    """The bytes a cosigner signs for checkpoint note text `body` at `timestamp`."""
    _check_timestamp(timestamp)
    return HEADER + b"time %d\n" % timestamp + body.encode("utf-8")


def _check_timestamp(timestamp: int) -> None:
    if type(timestamp) is not int or not 0 <= timestamp <= MAX_TIMESTAMP:
        raise CheckpointError(f"cosignature timestamp {timestamp!r} is not an integer in [0, 2^63)")


@dataclass(frozen=True)
class CosignatureVerifier:
    """A witness's Ed25519 public key under its name (vkey signature type 0x04)."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if type(self.public_key) is not bytes or len(self.public_key) != 32:
            raise CheckpointError(f"cosigner key for {self.name} is not 32 bytes")

    @property
    def key_id(self) -> bytes:
        return cosignature_key_id(self.name, self.public_key)

    @property
    def vkey(self) -> str:
        blob = base64.b64encode(bytes([SIG_TYPE_COSIGNATURE_V1]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{blob}"

    @classmethod
    def from_vkey(cls, vkey: str) -> CosignatureVerifier:
        parts = vkey.split("+", 2) if isinstance(vkey, str) else []
        if len(parts) != 3:
            raise CheckpointError(f"cosigner key has {len(parts)} '+'-separated fields, want 3")
        name, hex_id, blob = parts
        raw = _b64decode_strict(blob, "cosigner key")
        if len(raw) != 33 or raw[0] != SIG_TYPE_COSIGNATURE_V1:
            raise CheckpointError(
                f"cosigner key has {len(raw)} bytes of type {raw[:1].hex() or 'none'}, want 33 of type 04"
            )
        verifier = cls(name, raw[1:])
        if verifier.key_id.hex() != hex_id:
            raise CheckpointError(f"cosigner key id {hex_id} does not match its key ({verifier.key_id.hex()})")
        return verifier


@dataclass(frozen=True, eq=False)
class CosignatureSigner:
    """A witness's Ed25519 private key under its name."""

    name: str
    private_key: Ed25519PrivateKey

    def __post_init__(self) -> None:
        check_key_name(self.name)

    @property
    def verifier(self) -> CosignatureVerifier:
        raw = self.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return CosignatureVerifier(self.name, raw)

    def cosign(self, body: str, timestamp: int) -> str:
        """The signature line "— name base64(key id || timestamp || signature)\\n" on checkpoint text `body`."""
        Checkpoint.from_body(body)  # only checkpoints are cosigned
        signature = self.private_key.sign(cosigned_message(body, timestamp))
        blob = self.verifier.key_id + timestamp.to_bytes(8, "big") + signature
        return f"{EM_DASH_PREFIX}{self.name} {base64.b64encode(blob).decode()}\n"


@dataclass(frozen=True)
class Cosignature:
    """A verified cosignature: who, when, on which checkpoint, and its exact line."""

    cosigner: CosignatureVerifier
    timestamp: int
    checkpoint: Checkpoint
    line: str


def _note_text(note_or_body: str) -> str:
    """The checkpoint text of a signed note, or the text itself when it is a bare body."""
    return parse_note(note_or_body).text if "\n\n" in note_or_body else note_or_body


def verify_cosignature(note_or_body: str, line: str, verifier: CosignatureVerifier) -> Cosignature:
    """Check one cosignature line by `verifier` on a checkpoint (a signed note or its text); CheckpointError otherwise."""
    if not isinstance(line, str) or not isinstance(note_or_body, str):
        raise CheckpointError("cosignature line and checkpoint must be text")
    body = _note_text(note_or_body)
    checkpoint = Checkpoint.from_body(body)
    text = line[:-1] if line.endswith("\n") else line
    if not text.startswith(EM_DASH_PREFIX):
        raise CheckpointError("cosignature line does not start with an em dash and a space")
    fields = text[len(EM_DASH_PREFIX) :].split(" ")
    if len(fields) != 2:
        raise CheckpointError(f"cosignature line has {len(fields)} space-separated fields, want 2")
    name, blob = fields
    if name != verifier.name:
        raise CheckpointError(f"cosignature is by {name[:80]!r}, want {verifier.name!r}")
    raw = _b64decode_strict(blob, "cosignature")
    if len(raw) != SIGNATURE_BYTES:
        raise CheckpointError(f"cosignature has {len(raw)} bytes, want {SIGNATURE_BYTES}")
    if raw[:4] != verifier.key_id:
        raise CheckpointError(f"cosignature key id {raw[:4].hex()} is not {verifier.key_id.hex()} ({verifier.name})")
    timestamp = int.from_bytes(raw[4:12], "big")
    _check_timestamp(timestamp)
    try:
        Ed25519PublicKey.from_public_bytes(verifier.public_key).verify(raw[12:], cosigned_message(body, timestamp))
    except Exception:  # InvalidSignature, or a key that is not a curve point
        raise CheckpointError(
            f"cosignature by {verifier.name} at time {timestamp} on {checkpoint.origin} size {checkpoint.size} "
            "does not verify"
        ) from None
    return Cosignature(verifier, timestamp, checkpoint, text + "\n")


# -- the table ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredCosignature:
    kind: str
    origin: str
    size: int
    root: bytes
    cosigner: str  # the cosigner's vkey
    timestamp: int
    line: str
    note: str


def create_table(conn: sqlite3.Connection) -> None:
    """Create the cosignatures table unless it exists. Precondition: inside a write transaction."""
    if not _exists(conn):
        for statement in DDL:
            conn.execute(statement)


def _exists(conn: sqlite3.Connection) -> bool:
    return (
        conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'cosignatures'").fetchone()
        is not None
    )


def insert_cosignature(conn: sqlite3.Connection, kind: str, cosignature: Cosignature, note: str) -> None:
    """Store one cosignature (given or received). Precondition: inside a write transaction."""
    create_table(conn)
    cp = cosignature.checkpoint
    now = datetime.now(UTC).isoformat(timespec="seconds")
    conn.execute(
        "INSERT INTO cosignatures (kind, origin, size, root, cosigner, timestamp, line, note, recorded_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            kind,
            cp.origin,
            cp.size,
            cp.root,
            cosignature.cosigner.vkey,
            cosignature.timestamp,
            cosignature.line,
            note,
            now,
        ),
    )


def latest_given(conn: sqlite3.Connection, origin: str, cosigner: CosignatureVerifier) -> tuple[int, bytes] | None:
    """(size, root) of the largest checkpoint of `origin` this cosigner cosigned, or None if none."""
    if not _exists(conn):
        return None
    row = conn.execute(
        "SELECT size, root FROM cosignatures WHERE kind = 'given' AND origin = ? AND cosigner = ? "
        "ORDER BY size DESC, id DESC LIMIT 1",
        (origin, cosigner.vkey),
    ).fetchone()
    return (row[0], row[1]) if row else None


def read_cosignatures(
    conn: sqlite3.Connection, kind: str | None = None, origin: str | None = None
) -> list[StoredCosignature]:
    """Stored cosignatures in the order they were recorded, optionally of one kind and origin."""
    if not _exists(conn):
        return []
    where, params = [], []
    if kind is not None:
        where.append("kind = ?")
        params.append(kind)
    if origin is not None:
        where.append("origin = ?")
        params.append(origin)
    clause = f"WHERE {' AND '.join(where)} " if where else ""
    rows = conn.execute(
        f"SELECT kind, origin, size, root, cosigner, timestamp, line, note FROM cosignatures {clause}ORDER BY id",
        params,
    ).fetchall()
    return [StoredCosignature(*row) for row in rows]
