"""The run manifest: a canonical JSON body, its run id, and the publisher's signature beside it.

Files in the run directory:

- `manifest.json`: the body, canonical JSON (keys sorted, no whitespace,
  UTF-8, no NaN/Infinity), exactly as `canonical_json` writes it.
- `manifest.sig.json`: {"format": "p2paudit-run-signature", "version": 1,
  "run_id": "sha256:<hex>", "scheme": "ed25519", "public_key": "<64 hex>",
  "signature": "<128 hex>"}.

The run id is SHA-256 of the body bytes as stored. The signature is Ed25519
over SIGNATURE_DOMAIN || body bytes. Steps are 0-based, as in the engine:
step n reads `batch_for_step(..., n)` and turns state n (n updates done) into
state n + 1. The body lists the digest of state 0 and, for every step, the
data digest, the loss and the digest of the state it produces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from p2paudit.errors import InputError
from p2paudit.identity import Identity, sign, verify_signature
from p2paudit.run.digest import StateDigest, digest_bytes, format_digest, parse_digest
from p2paudit.run.shards import DataSpec
from p2paudit.run.storage import read_file, write_atomic

RUN_FORMAT = "p2paudit-run"
RUN_VERSION = 1
SIGNATURE_FORMAT = "p2paudit-run-signature"
SIGNATURE_DOMAIN = b"p2paudit run manifest v1\x00"
MANIFEST_FILE = "manifest.json"
SIGNATURE_FILE = "manifest.sig.json"
MAX_MANIFEST_BYTES = 256 * 1024 * 1024


def canonical_json(value: object) -> bytes:
    """Sorted keys, no whitespace, UTF-8, NaN and infinities refused."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except ValueError as exc:
        raise InputError(f"manifest body cannot be canonical JSON: {exc}") from None


@dataclass(frozen=True)
class StepRecord:
    """What the publisher claims for one step: data digest, loss, digest of the state it produces."""

    step: int
    data_digest: bytes
    loss: float
    output: StateDigest
    trace: bytes | None = None  # SHA-256 of the published trace file, if the publisher wrote one

    def to_dict(self) -> dict:
        out = {"step": self.step, "data": format_digest(self.data_digest), "loss": self.loss,
               "output": self.output.to_dict()}
        if self.trace is not None:
            out["trace"] = format_digest(self.trace)
        return out

    @staticmethod
    def from_dict(item: object, step: int) -> "StepRecord":
        where = f"manifest steps[{step}]"
        if not isinstance(item, dict) or item.get("step") != step:
            raise InputError(f"{where} must be an object with \"step\": {step}")
        loss = item.get("loss")
        if not isinstance(loss, float | int) or isinstance(loss, bool):
            raise InputError(f"{where}.loss is {loss!r}, want a number")
        trace = parse_digest(item["trace"], f"{where}.trace") if "trace" in item else None
        return StepRecord(step, parse_digest(item.get("data"), f"{where}.data"), float(loss),
                          StateDigest.from_dict(item.get("output"), f"{where}.output"), trace)


@dataclass(frozen=True)
class Manifest:
    """A parsed, checked manifest body plus its stored bytes, run id and signature."""

    body: dict
    body_bytes: bytes
    run_id: bytes
    public_key: bytes
    signature: bytes
    data: DataSpec
    initial_state: StateDigest
    steps: tuple[StepRecord, ...]
    checkpoints: tuple[int, ...]  # states stored as checkpoints (0 always; N, the last, always)

    @property
    def config_dict(self) -> dict:
        return self.body["config"]

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    def state_digest(self, n: int) -> StateDigest:
        """The claimed digest of state n (0 <= n <= num_steps)."""
        return self.initial_state if n == 0 else self.steps[n - 1].output

    def nearest_checkpoint(self, n: int) -> int:
        """The largest checkpointed state index <= n."""
        return max(c for c in self.checkpoints if c <= n)


def sign_body(body: dict, identity: Identity) -> tuple[bytes, dict]:
    """(canonical body bytes, signature file object) for `body` signed by `identity`."""
    body_bytes = canonical_json(body)
    signature = sign(identity, SIGNATURE_DOMAIN + body_bytes)
    envelope = {"format": SIGNATURE_FORMAT, "version": RUN_VERSION, "run_id": format_digest(digest_bytes(body_bytes)),
                "scheme": "ed25519", "public_key": identity.public_key.hex(), "signature": signature.hex()}
    return body_bytes, envelope


def write_manifest(run_dir: Path, body: dict, identity: Identity) -> bytes:
    """Sign and write manifest.json and manifest.sig.json (signature last); returns the run id."""
    body_bytes, envelope = sign_body(body, identity)
    # The body first: a kill between the two writes leaves a signature that no
    # longer matches, which read_manifest reports, never a silently wrong run.
    write_atomic(run_dir / MANIFEST_FILE, body_bytes)
    write_atomic(run_dir / SIGNATURE_FILE, canonical_json(envelope))
    return digest_bytes(body_bytes)


def read_manifest(run_dir: Path) -> Manifest:
    """Read and check the manifest of `run_dir`: format, run id, signature, every field.

    Raises InputError naming the file and what is wrong.
    """
    body_path, sig_path = run_dir / MANIFEST_FILE, run_dir / SIGNATURE_FILE
    body_bytes = read_file(body_path, "manifest", MAX_MANIFEST_BYTES)
    run_id, public_key, signature = _read_signature(sig_path)
    if digest_bytes(body_bytes) != run_id:
        raise InputError(f"manifest {body_path}: its digest {format_digest(digest_bytes(body_bytes))} "
                         f"is not the run id {format_digest(run_id)} in {sig_path}")
    if not verify_signature(public_key, signature, SIGNATURE_DOMAIN + body_bytes):
        raise InputError(f"manifest {body_path}: the signature in {sig_path} does not verify "
                         f"for public key {public_key.hex()}")
    body = _parse_json(body_bytes, body_path)
    if canonical_json(body) != body_bytes:
        raise InputError(f"manifest {body_path} is not canonical JSON (sorted keys, no whitespace)")
    try:
        return _parse_body(body, body_bytes, run_id, public_key, signature)
    except InputError as exc:
        raise InputError(f"{body_path}: {exc}") from None


def _parse_json(data: bytes, path: Path) -> dict:
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path} is not UTF-8 JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InputError(f"{path} holds a JSON {type(value).__name__}, want an object")
    return value


def _read_signature(path: Path) -> tuple[bytes, bytes, bytes]:
    blob = read_file(path, "manifest signature", 64 * 1024)
    envelope = _parse_json(blob, path)
    if envelope.get("format") != SIGNATURE_FORMAT or envelope.get("version") != RUN_VERSION:
        raise InputError(f"{path}: format {envelope.get('format')!r} version {envelope.get('version')!r}, "
                         f"want {SIGNATURE_FORMAT!r} version {RUN_VERSION}")
    if envelope.get("scheme") != "ed25519":
        raise InputError(f"{path}: scheme {envelope.get('scheme')!r}, want 'ed25519'")
    run_id = parse_digest(envelope.get("run_id"), f"{path} run_id")
    public_key = _parse_hex(envelope.get("public_key"), 32, f"{path} public_key")
    signature = _parse_hex(envelope.get("signature"), 64, f"{path} signature")
    # One encoding only (e.g. lower-case hex), so that no changed byte can leave the file valid.
    canonical = {"format": SIGNATURE_FORMAT, "version": RUN_VERSION, "run_id": format_digest(run_id),
                 "scheme": "ed25519", "public_key": public_key.hex(), "signature": signature.hex()}
    if canonical_json(canonical) != blob:
        raise InputError(f"{path} is not in canonical form (sorted keys, no whitespace, lower-case hex, no extra keys)")
    return run_id, public_key, signature


def _parse_hex(text: object, size: int, where: str) -> bytes:
    try:
        raw = bytes.fromhex(text) if isinstance(text, str) else b""
    except ValueError:
        raw = b""
    if len(raw) != size:
        raise InputError(f"{where} must be {2 * size} hex digits")
    return raw


def _parse_body(body: dict, body_bytes: bytes, run_id: bytes, public_key: bytes, signature: bytes) -> Manifest:
    import kernels

    if body.get("format") != RUN_FORMAT or body.get("version") != RUN_VERSION:
        raise InputError(f"format {body.get('format')!r} version {body.get('version')!r}, "
                         f"want {RUN_FORMAT!r} version {RUN_VERSION}")
    if body.get("arithmetic_version") != kernels.ARITHMETIC_VERSION:
        raise InputError(f"arithmetic version {body.get('arithmetic_version')!r}, this verifier implements "
                         f"{kernels.ARITHMETIC_VERSION}")
    from p2paudit.engine import ENGINE_VERSION

    if body.get("engine_version") != ENGINE_VERSION:
        raise InputError(f"engine version {body.get('engine_version')!r}, this verifier runs engine "
                         f"version {ENGINE_VERSION!r}")
    if not isinstance(body.get("config"), dict):
        raise InputError("config must be an object")
    steps = body.get("steps")
    if not isinstance(steps, list) or not steps:
        raise InputError("steps must be a non-empty list")
    records = tuple(StepRecord.from_dict(item, n) for n, item in enumerate(steps))
    checkpoints = body.get("checkpoints")
    if (not isinstance(checkpoints, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in checkpoints)
            or checkpoints != sorted(set(checkpoints)) or not checkpoints or checkpoints[0] != 0
            or checkpoints[-1] != len(records)):
        raise InputError(f"checkpoints must be increasing state indices from 0 to {len(records)}")
    if body.get("loss_curve") != [r.loss for r in records]:
        raise InputError("loss_curve is not the steps' losses in order")
    return Manifest(body, body_bytes, run_id, public_key, signature, DataSpec.from_dict(body.get("data")),
                    StateDigest.from_dict(body.get("initial_state"), "initial_state"), records, tuple(checkpoints))
