"""The signed run manifest: the canonical body (run.manifest_body), its run id and the publisher's signature.

Files in the run directory:

- `manifest.json`: the body, canonical JSON (keys sorted, no whitespace,
  UTF-8, no NaN/Infinity), exactly as `canonical_json` writes it.
- `manifest.sig.json`: {"format": "p2paudit-run-signature", "version": 1,
  "run_id": "sha256:<hex>", "scheme": "ed25519", "public_key": "<64 hex>",
  "signature": "<128 hex>"}.

The run id is SHA-256 of the body bytes as stored. The signature is Ed25519
over SIGNATURE_DOMAIN || body bytes. Reading checks both files' sizes, the run
id, the signature, then every field of the body (run.manifest_body.check_body),
holding a few times the body's size at most (manifest_memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from p2paudit.engine.config import TrainConfig
from p2paudit.errors import InputError, InternalError
from p2paudit.identity import Identity, sign, verify_signature
from p2paudit.run.digest import StateDigest, digest_bytes, format_digest, parse_digest
from p2paudit.run.manifest_body import (
    RUN_VERSION,
    Body,
    StepRecord,
    canonical_json,
    canonical_pieces,
    check_body,
    same_bytes,
    show_value,
)
from p2paudit.run.shards import DataSpec
from p2paudit.run.storage import parse_json, read_file, write_atomic

SIGNATURE_FORMAT = "p2paudit-run-signature"
SIGNATURE_DOMAIN = b"p2paudit run manifest v1\x00"
# A lab run's manifest (run.lab_run) is signed under its own domain: neither kind's signature verifies as the
# other's (they differ at byte 9, neither is the other's prefix).
LAB_SIGNATURE_DOMAIN = b"p2paudit lab run manifest v1\x00"
MANIFEST_FILE = "manifest.json"
SIGNATURE_FILE = "manifest.sig.json"
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
# json_structure of a manifest (run.storage): an honest one has about one array, object or separator per 70
# bytes (a state's tensor digests), 3.7M in MAX_MANIFEST_BYTES; 256 MiB of `{},` would parse into 6.5 GiB
MAX_MANIFEST_STRUCTURE = 8_000_000
MAX_SIGNATURE_BYTES = 4096
MANIFEST_MEMORY_RATIO = 9  # checking a body holds at most about this many times its size (manifest_memory)


@dataclass(frozen=True)
class Manifest:
    """A parsed, checked manifest body plus its stored bytes, run id and signature."""

    head: dict[str, Any]  # the body's fields but "steps" and "loss_curve" (those are held parsed, in `steps`)
    body_bytes: bytes
    run_id: bytes
    public_key: bytes
    signature: bytes
    data: DataSpec
    initial_state: StateDigest
    steps: tuple[StepRecord, ...]
    checkpoints: tuple[int, ...]  # states stored as checkpoints (0 always; N, the last, always)
    config: TrainConfig | None = None  # the parsed config (always set by read_manifest)

    @property
    def config_dict(self) -> dict[str, Any]:
        config = self.head["config"]
        if not isinstance(config, dict):  # check_body parsed it as a TrainConfig
            raise InternalError(f"manifest {self.run_id.hex()[:16]}: config is not an object")
        return config

    @property
    def arithmetic(self) -> int:
        """The run's arithmetic version (checked to be one this verifier implements)."""
        version: int = self.head["arithmetic_version"]
        return version

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def state_digest(self, n: int) -> StateDigest:
        """The claimed digest of state n (0 <= n <= num_steps)."""
        return self.initial_state if n == 0 else self.steps[n - 1].output

    def nearest_checkpoint(self, n: int) -> int:
        """The largest checkpointed state index <= n."""
        return max(c for c in self.checkpoints if c <= n)


def sign_body(
    body: dict[str, Any], identity: Identity, domain: bytes = SIGNATURE_DOMAIN
) -> tuple[bytes, dict[str, Any]]:
    """(canonical body bytes, signature file object) for `body` signed by `identity` over domain || body
    (an engine run's SIGNATURE_DOMAIN; a lab run's is run.lab_run.LAB_SIGNATURE_DOMAIN)."""
    body_bytes = canonical_json(body)
    signature = sign(identity, domain + body_bytes)
    envelope = {
        "format": SIGNATURE_FORMAT,
        "version": RUN_VERSION,
        "run_id": format_digest(digest_bytes(body_bytes)),
        "scheme": "ed25519",
        "public_key": identity.public_key.hex(),
        "signature": signature.hex(),
    }
    return body_bytes, envelope


def write_manifest(run_dir: Path, body: dict[str, Any], identity: Identity) -> bytes:
    """Sign and write manifest.json and manifest.sig.json (signature last); returns the run id."""
    body_bytes, envelope = sign_body(body, identity)
    # The body first: a kill between the two writes leaves a signature that no
    # longer matches, which read_manifest reports, never a silently wrong run.
    write_atomic(run_dir / MANIFEST_FILE, body_bytes)
    write_atomic(run_dir / SIGNATURE_FILE, canonical_json(envelope))
    return digest_bytes(body_bytes)


def read_manifest(run_dir: Path) -> Manifest:
    """Read and check the manifest of `run_dir`: format, run id, signature, every field.

    Both files must be regular files directly in `run_dir` (no link, FIFO or
    device), of bounded size. Raises InputError naming the file and what is wrong.
    """
    body_path, sig_path = run_dir / MANIFEST_FILE, run_dir / SIGNATURE_FILE
    body_bytes = read_file(body_path, "manifest", MAX_MANIFEST_BYTES, run_dir)
    sig_bytes = read_file(sig_path, "manifest signature", MAX_SIGNATURE_BYTES, run_dir)
    return manifest_from_bytes(body_bytes, sig_bytes, str(body_path), str(sig_path))


def manifest_from_bytes(body_bytes: bytes, sig_bytes: bytes, body_where: str, sig_where: str) -> Manifest:
    """Check a manifest given as bytes (read from disk or fetched): run id, signature, every field.

    `body_where` and `sig_where` name the two files (a path or a URL) in error
    messages. The callers bound the sizes (MAX_MANIFEST_BYTES, MAX_SIGNATURE_BYTES).
    """
    if len(body_bytes) > MAX_MANIFEST_BYTES or len(sig_bytes) > MAX_SIGNATURE_BYTES:
        raise InputError(
            f"manifest {body_where} ({len(body_bytes)} bytes) or its signature {sig_where} "
            f"({len(sig_bytes)} bytes) is larger than the {MAX_MANIFEST_BYTES} or {MAX_SIGNATURE_BYTES} allowed"
        )
    run_id, public_key, signature = _parse_signature(sig_bytes, sig_where)
    try:
        parsed = _verify_and_parse(body_bytes, body_where, sig_where, run_id, public_key, signature)
    except MemoryError:  # an address-space limit (ulimit -v) met while the body was verified or parsed
        raise InputError(
            f"manifest {body_where} ({len(body_bytes)} bytes) needs about {manifest_memory(len(body_bytes))} "
            f"bytes of memory to be checked, more than this process could have"
        ) from None
    return Manifest(
        parsed.head(),
        body_bytes,
        run_id,
        public_key,
        signature,
        parsed.data,
        parsed.initial_state,
        parsed.steps,
        parsed.checkpoints,
        parsed.config,
    )


def _verify_and_parse(
    body_bytes: bytes, body_where: str, sig_where: str, run_id: bytes, public_key: bytes, signature: bytes
) -> Body:
    """The checked Body of a manifest whose run id and signature are checked first."""
    if digest_bytes(body_bytes) != run_id:
        raise InputError(
            f"manifest {body_where}: its digest {format_digest(digest_bytes(body_bytes))} "
            f"is not the run id {format_digest(run_id)} in {sig_where}"
        )
    if not verify_signature(public_key, signature, SIGNATURE_DOMAIN + body_bytes):
        if verify_signature(public_key, signature, LAB_SIGNATURE_DOMAIN + body_bytes):  # say what it is instead
            raise InputError(
                f"manifest {body_where} is a lab run's (train-script's), not an engine run's: its replay runs the "
                "publisher's script (verify-range and daemon replay it with --run-lab-code)"
            )
        raise InputError(
            f"manifest {body_where}: the signature in {sig_where} does not verify for public key {public_key.hex()}"
        )
    return _parse_body(body_bytes, body_where)


def manifest_memory(size: int) -> int:
    """About the most memory (bytes) that checking a manifest body of `size` bytes holds at once:
    the bytes, the parsed JSON and the parsed records together (benchmarks/manifest_bench.py measures it)."""
    return MANIFEST_MEMORY_RATIO * size


def _parse_body(body_bytes: bytes, body_where: str) -> Body:
    """The checked Body of canonical body bytes; the parsed JSON is dropped when this returns."""
    body = _parse_object(body_bytes, body_where)
    if not same_bytes(canonical_pieces(body), body_bytes):
        raise InputError(f"manifest {body_where} is not canonical JSON (sorted keys, no whitespace)")
    try:
        return check_body(body, complete=True, encoded=body_bytes)
    except InputError as exc:
        raise InputError(f"{body_where}: {exc}") from None


def read_progress(path: Path, max_bytes: int = MAX_MANIFEST_BYTES) -> tuple[dict[str, Any], Body]:
    """(body, checked body) of a publisher's progress file: a canonical, unsigned, partial manifest body.

    InputError (one line) if the file is not a regular file in its directory,
    too large, not canonical JSON, or not a valid body so far.
    """
    blob = read_file(path, "progress file", max_bytes, path.parent)
    body = _parse_object(blob, path)
    if canonical_json(body) != blob:
        raise InputError(f"{path} is not canonical JSON (sorted keys, no whitespace)")
    return body, check_body(body, complete=False)


def _parse_object(data: bytes, path: Path | str) -> dict[str, Any]:
    value = parse_json(data, str(path), MAX_MANIFEST_STRUCTURE)
    if not isinstance(value, dict):
        raise InputError(f"{path} holds a JSON {type(value).__name__}, want an object")
    return value


def parse_signature(blob: bytes, where: Path | str) -> tuple[bytes, bytes, bytes]:
    """(run id, public key, signature) of a manifest.sig.json's bytes, checked as an envelope (not yet
    against any body): a remote fetch reads it first, to pin the key and bound the body before fetching it."""
    return _parse_signature(blob, where)


def _parse_signature(blob: bytes, path: Path | str) -> tuple[bytes, bytes, bytes]:
    envelope = _parse_object(blob, path)
    if (
        envelope.get("format") != SIGNATURE_FORMAT
        or type(envelope.get("version")) is not int
        or envelope.get("version") != RUN_VERSION
    ):
        raise InputError(
            f"{path}: format {show_value(envelope.get('format'))} version {show_value(envelope.get('version'))}, "
            f"want {SIGNATURE_FORMAT!r} version {RUN_VERSION}"
        )
    if envelope.get("scheme") != "ed25519":
        raise InputError(f"{path}: scheme {show_value(envelope.get('scheme'))}, want 'ed25519'")
    run_id = parse_digest(envelope.get("run_id"), f"{path} run_id")
    public_key = _parse_hex(envelope.get("public_key"), 32, f"{path} public_key")
    signature = _parse_hex(envelope.get("signature"), 64, f"{path} signature")
    # One encoding only (e.g. lower-case hex), so that no changed byte can leave the file valid.
    canonical = {
        "format": SIGNATURE_FORMAT,
        "version": RUN_VERSION,
        "run_id": format_digest(run_id),
        "scheme": "ed25519",
        "public_key": public_key.hex(),
        "signature": signature.hex(),
    }
    if canonical_json(canonical) != blob:
        raise InputError(f"{path} is not in canonical form (sorted keys, no whitespace, lower-case hex, no extra keys)")
    return run_id, public_key, signature


def _parse_hex(text: object, size: int, where: str) -> bytes:
    try:
        raw = bytes.fromhex(text) if isinstance(text, str) and len(text) == 2 * size else b""
    except ValueError:
        raw = b""
    if len(raw) != size:
        raise InputError(f"{where} must be {2 * size} hex digits, got {show_value(text)}")
    return raw
