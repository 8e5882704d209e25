"""C2SP signed notes (c2sp.org/signed-note) with Ed25519 keys, and tlog checkpoints (c2sp.org/tlog-checkpoint).

A signed note is UTF-8 text ending in a newline, a blank line, then one or
more signature lines "— <key name> base64(key id || signature)". A checkpoint
is a note whose text is "origin\\nsize\\nbase64(root)\\n" (plus optional
non-empty extension lines). Key id = SHA-256(name || 0x0A || 0x01 || pubkey)[:4];
verifier keys are written "name+hexkeyid+base64(0x01 || pubkey)".
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger.errors import CheckpointError
from ledger.merkle import HASH_SIZE

SIG_TYPE_ED25519 = 0x01
EM_DASH_PREFIX = "\u2014 "
MAX_SIGNATURES = 100  # the spec asks verifiers to accept at least 16
MAX_NOTE_CHARS = 1 << 20
_SIZE_RE = re.compile(r"0|[1-9][0-9]*")
_MAX_TREE_SIZE = (1 << 64) - 1


def check_key_name(name: str) -> None:
    """Raise CheckpointError unless `name` is a valid key name: non-empty, no Unicode space, no '+'."""
    if not isinstance(name, str) or not name:
        raise CheckpointError("key name is empty")
    if "+" in name or any(c.isspace() for c in name) or _has_control(name):
        raise CheckpointError(f"key name {name!r} contains a space, a control character or '+'")


def _has_control(text: str) -> bool:
    return any(ord(c) < 0x20 and c != "\n" for c in text)


def key_id(name: str, public_key: bytes) -> bytes:
    """The 4-byte Ed25519 key id: SHA-256(name || 0x0A || 0x01 || public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([SIG_TYPE_ED25519]) + public_key).digest()[:4]


def _b64decode_strict(text: str, what: str) -> bytes:
    """Standard base64 with padding, canonical only (re-encoding gives the same text)."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise CheckpointError(f"{what} is not valid base64: {text[:60]!r}") from None
    if base64.b64encode(raw).decode() != text:
        raise CheckpointError(f"{what} is not canonical base64: {text[:60]!r}")
    return raw


@dataclass(frozen=True)
class NoteVerifier:
    """An Ed25519 public key under a name; verifies signatures whose (name, key id) match it."""

    name: str
    public_key: bytes

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if not isinstance(self.public_key, bytes) or len(self.public_key) != 32:
            n = (
                len(self.public_key)
                if isinstance(self.public_key, (bytes, bytearray))
                else type(self.public_key).__name__
            )
            raise CheckpointError(f"Ed25519 public key for {self.name} has {n} bytes, want 32")

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.public_key)

    @property
    def vkey(self) -> str:
        """The C2SP verifier key string: name+hexkeyid+base64(0x01 || public key)."""
        blob = base64.b64encode(bytes([SIG_TYPE_ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{blob}"

    @classmethod
    def from_vkey(cls, vkey: str) -> NoteVerifier:
        """Parse a verifier key string; raise CheckpointError naming what is wrong."""
        parts = vkey.split("+", 2) if isinstance(vkey, str) else []  # base64 may itself hold "+"
        if len(parts) != 3:
            raise CheckpointError(f"verifier key has {len(parts)} '+'-separated fields, want 3")
        name, hex_id, blob = parts
        check_key_name(name)
        if not re.fullmatch(r"[0-9a-f]{8}", hex_id):
            raise CheckpointError(f"verifier key id {hex_id!r} is not 8 lowercase hex digits")
        raw = _b64decode_strict(blob, "verifier key")
        if len(raw) != 33 or raw[0] != SIG_TYPE_ED25519:
            raise CheckpointError(
                f"verifier key has {len(raw)} bytes of type {raw[:1].hex() or 'none'}, want 33 of type 01"
            )
        verifier = cls(name, raw[1:])
        if verifier.key_id.hex() != hex_id:
            raise CheckpointError(f"verifier key id {hex_id} does not match its key ({verifier.key_id.hex()})")
        return verifier

    def verify(self, text: bytes, signature: bytes) -> bool:
        """True when `signature` (64 bytes, without the key id) is this key's signature of `text`."""
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, text)
        except (InvalidSignature, ValueError):
            return False
        return True


@dataclass(frozen=True, eq=False)
class NoteSigner:
    """An Ed25519 private key under a name, signing note texts."""

    name: str
    private_key: Ed25519PrivateKey

    def __post_init__(self) -> None:
        check_key_name(self.name)
        if not isinstance(self.private_key, Ed25519PrivateKey):
            raise CheckpointError(
                f"signer {self.name} needs an Ed25519PrivateKey, got {type(self.private_key).__name__}"
            )

    @property
    def verifier(self) -> NoteVerifier:
        raw = self.private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
        return NoteVerifier(self.name, raw)

    def signature_line(self, text: str) -> str:
        """The line "— name base64(key id || signature)\\n" for the note text."""
        sig = self.private_key.sign(text.encode("utf-8"))
        return f"{EM_DASH_PREFIX}{self.name} {base64.b64encode(self.verifier.key_id + sig).decode()}\n"


@dataclass(frozen=True)
class NoteSignature:
    """One signature line of a note: the key name, the 4-byte key id and the signature bytes."""

    name: str
    key_id: bytes
    signature: bytes


@dataclass(frozen=True)
class Note:
    """A parsed (not yet verified) signed note: its text (with the final newline) and its signatures."""

    text: str
    signatures: tuple[NoteSignature, ...]


@dataclass(frozen=True)
class Checkpoint:
    """A log's tree head: origin, size and the 32-byte RFC 9162 root (plus optional extension lines)."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str) or not self.origin or "\n" in self.origin or _has_control(self.origin):
            raise CheckpointError(f"checkpoint origin {self.origin!r} is empty or has a newline or control character")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or not 0 <= self.size <= _MAX_TREE_SIZE:
            raise CheckpointError(f"checkpoint size {self.size!r} is not an integer in [0, 2^64)")
        if not isinstance(self.root, bytes) or len(self.root) != HASH_SIZE:
            n = len(self.root) if isinstance(self.root, (bytes, bytearray)) else type(self.root).__name__
            raise CheckpointError(f"checkpoint root has {n} bytes, want {HASH_SIZE}")
        for line in self.extensions:
            if not line or "\n" in line or _has_control(line):
                raise CheckpointError(f"checkpoint extension line {line!r} is empty or has a newline")

    def body(self) -> str:
        """The note text: origin, size, base64 root and extension lines, each ending in a newline."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(), *self.extensions]
        return "".join(line + "\n" for line in lines)

    @classmethod
    def from_body(cls, text: str) -> Checkpoint:
        """Parse a checkpoint note text; raise CheckpointError naming the bad line."""
        if not text.endswith("\n"):
            raise CheckpointError("checkpoint text does not end with a newline")
        lines = text[:-1].split("\n")
        if len(lines) < 3:
            raise CheckpointError(f"checkpoint text has {len(lines)} lines, want at least 3")
        for i, line in enumerate(lines):
            if not line:
                raise CheckpointError(f"checkpoint line {i + 1} is empty")
        if not _SIZE_RE.fullmatch(lines[1]):
            raise CheckpointError(
                f"checkpoint size line {lines[1][:40]!r} is not a decimal number without leading zeros"
            )
        root = _b64decode_strict(lines[2], "checkpoint root")
        return cls(lines[0], int(lines[1]), root, tuple(lines[3:]))


def parse_note(note: object) -> Note:
    """Split a signed note into its text and signature lines, checking the format only (no keys).

    `note` is text or UTF-8 bytes; anything else (a peer's message can hold anything) is refused.
    """
    if isinstance(note, bytes):
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError as e:
            raise CheckpointError(f"note is not valid UTF-8 (byte {e.start})") from None
    if not isinstance(note, str):
        raise CheckpointError(f"note is {type(note).__name__}, want text")
    if len(note) > MAX_NOTE_CHARS:
        raise CheckpointError(f"note has {len(note)} characters, limit {MAX_NOTE_CHARS}")
    if _has_control(note):
        raise CheckpointError("note contains a control character other than newline")
    if not note.endswith("\n"):
        raise CheckpointError("note does not end with a newline")
    split = note.rfind("\n\n")
    if split < 0:
        raise CheckpointError("note has no blank line before its signatures")
    text, sig_block = note[: split + 1], note[split + 2 :]
    lines = sig_block[:-1].split("\n") if sig_block else []
    if not lines:
        raise CheckpointError("note has no signature lines")
    if len(lines) > MAX_SIGNATURES:
        raise CheckpointError(f"note has {len(lines)} signatures, limit {MAX_SIGNATURES}")
    return Note(text, tuple(_parse_signature_line(line, i + 1) for i, line in enumerate(lines)))


def _parse_signature_line(line: str, number: int) -> NoteSignature:
    if not line.startswith(EM_DASH_PREFIX):
        raise CheckpointError(f"signature line {number} does not start with an em dash and a space")
    fields = line[len(EM_DASH_PREFIX) :].split(" ")
    if len(fields) != 2:
        raise CheckpointError(f"signature line {number} has {len(fields)} space-separated fields, want 2")
    name, blob = fields
    check_key_name(name)
    raw = _b64decode_strict(blob, f"signature line {number}")
    if len(raw) < 5:
        raise CheckpointError(f"signature line {number} has {len(raw)} bytes, want a 4-byte key id and a signature")
    return NoteSignature(name, raw[:4], raw[4:])


def sign_note(text: str, signers: Sequence[NoteSigner]) -> str:
    """A signed note: `text` (non-empty, ending in a newline), a blank line, one signature line per signer."""
    if not text.endswith("\n") or _has_control(text):
        raise CheckpointError("note text must end with a newline and contain no control characters")
    if not signers:
        raise CheckpointError("a note needs at least one signer")
    return text + "\n" + "".join(s.signature_line(text) for s in signers)


def open_note(note: str, verifiers: Iterable[NoteVerifier]) -> tuple[str, tuple[NoteVerifier, ...]]:
    """Verify a signed note; return its text and the known keys whose signatures verified.

    Signatures from unknown (name, key id) pairs are ignored, as the spec
    requires; one bad signature from a known key rejects the whole note; a note
    with no verified signature from a known key is rejected.
    """
    parsed = parse_note(note)
    known = {(v.name, v.key_id): v for v in verifiers}
    body = parsed.text.encode("utf-8")
    verified: list[NoteVerifier] = []
    for sig in parsed.signatures:
        v = known.get((sig.name, sig.key_id))
        if v is None:
            continue
        if not v.verify(body, sig.signature):
            raise CheckpointError(f"signature by {sig.name}+{sig.key_id.hex()} does not verify")
        if v not in verified:
            verified.append(v)
    if not verified:
        names = ", ".join(f"{s.name}+{s.key_id.hex()}" for s in parsed.signatures)
        raise CheckpointError(f"note has no signature from a known key (signed by {names})")
    return parsed.text, tuple(verified)


def sign_checkpoint(checkpoint: Checkpoint, signer: NoteSigner) -> str:
    """The checkpoint as a signed note, signed by `signer`."""
    return sign_note(checkpoint.body(), [signer])


def open_checkpoint(note: str, verifiers: Iterable[NoteVerifier] | NoteVerifier) -> Checkpoint:
    """Verify a signed checkpoint note against the known keys and parse its body; CheckpointError otherwise."""
    if isinstance(verifiers, NoteVerifier):
        verifiers = [verifiers]
    text, _ = open_note(note, verifiers)
    return Checkpoint.from_body(text)
