"""A lab run directory: a lab script's claims (p2paudit.lab.LabClaims) signed, with a checkpoint of every state.

    manifest.json        canonical JSON body, signed as an engine run's is (run.manifest.sign_body) but
                         under a domain of its own, LAB_SIGNATURE_DOMAIN, so that no lab manifest's
                         signature verifies as an engine manifest's, nor the reverse:
                         {"format": "p2paudit-lab-run", "version": 2, "torch_build": "torch 2.13.0+cpu (git ...)",
                          "op_table_version": 1, "arithmetic_version": 2, "backend": "cpu",
                          "script": {"name": "lab_llama.py", "sha256": "sha256:<hex>", "source": "<the text>"},
                          "initial_state": {digest, tensors}, "steps": [{"step": n, "state": {digest, tensors},
                          "trace": "sha256:<hex>", "trace_file": "sha256:<hex>",
                          "batch": {"shape": [B, T + 1], "sha256": "sha256:<hex>"}}, ...]}
    manifest.sig.json    the signature envelope (run.manifest)
    checkpoints/         every state 0..N (run.checkpoint's safetensors format)
    lab-traces/step-<n:08d>.json   {"ops": [record text, ...], "values": [[op, "sha256:<hex>"], ...] | null}
    lab-batches/step-<n:08d>.bin   what step n trained on: int64 tokens of the shape its manifest entry names,
                                   C order, little-endian (p2paudit.lab.batch); a replay trains on it
    script.py            the script itself, byte for byte (its SHA-256 is the manifest's)

The lab mode's guarantee is named as such: a replay needs the torch build the manifest names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from p2paudit.errors import InputError
from p2paudit.identity import Identity, verify_signature
from p2paudit.lab import LabClaims, LabScript, check_script_bytes, load_script, train_script
from p2paudit.lab.batch import BatchClaim, batch_bytes, check_shape, decode_batch
from p2paudit.run.checkpoint import load_checkpoint, save_checkpoint
from p2paudit.run.checkpoint_layout import MAX_STATE_TENSORS
from p2paudit.run.digest import StateDigest, digest_bytes, format_digest, parse_digest
from p2paudit.run.lab_format import BATCHES_DIR, LAB_FORMAT, SCRIPT_FILE, TRACES_DIR
from p2paudit.run.manifest import (
    LAB_SIGNATURE_DOMAIN,
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_STRUCTURE,
    SIGNATURE_FILE,
    parse_signature,
)
from p2paudit.run.manifest import sign_body as sign_manifest
from p2paudit.run.manifest_body import canonical_json
from p2paudit.run.storage import parse_json, read_file, write_atomic
from p2paudit.run.traces import MAX_TRACE_STRUCTURE

T = TypeVar("T")

LAB_VERSION = 2  # 2: each step's batch published (lab-batches/)
# What a lab manifest's signature covers: LAB_SIGNATURE_DOMAIN || body (run.manifest defines it beside an engine
# manifest's SIGNATURE_DOMAIN, so that a lab run's manifest met where an engine run's is expected is named).
MAX_TRACE_FILE = 64 * 1024 * 1024


def lab_trace_path(step: int) -> str:
    return f"{TRACES_DIR}/step-{step:08d}.json"


def lab_batch_path(step: int) -> str:
    return f"{BATCHES_DIR}/step-{step:08d}.bin"


def _trace_bytes(claims: LabClaims, step: int) -> bytes:
    values = claims.values[step]
    body = {
        "ops": [r.decode("ascii") for r in claims.trace_ops[step]],
        "values": None if values is None else [[name, format_digest(d)] for name, d in values],
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _check_empty(run_dir: Path) -> None:
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        raise InputError(f"run directory {run_dir} is not an empty directory")


def publish_lab_run(
    run_dir: Path,
    script: LabScript,
    claims: LabClaims,
    states: list[dict[str, np.ndarray]],
    batches: list[np.ndarray],
    identity: Identity,
) -> bytes:
    """Write the run directory (checkpoints, traces, batches, the script, then the signed manifest); returns
    the run id."""
    _check_empty(run_dir)
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run_dir / TRACES_DIR).mkdir(exist_ok=True)
    (run_dir / BATCHES_DIR).mkdir(exist_ok=True)
    for n, tokens in enumerate(batches):
        write_atomic(run_dir / lab_batch_path(n), batch_bytes(tokens))
    digests = [claims.initial, *claims.states]
    for n, state in enumerate(states):
        save_checkpoint(run_dir, n, state, digests[n])
    steps = []
    for n in range(len(claims.states)):
        blob = _trace_bytes(claims, n)
        write_atomic(run_dir / lab_trace_path(n), blob)
        steps.append({"step": n, "state": claims.states[n].to_dict(), "trace": format_digest(claims.traces[n]),
                      "trace_file": format_digest(digest_bytes(blob)),
                      "batch": {"shape": list(claims.batches[n].shape), "sha256": format_digest(claims.batches[n].digest)}})  # fmt: skip
    source = script.path.read_bytes()
    write_atomic(run_dir / SCRIPT_FILE, source)
    body = {
        "format": LAB_FORMAT,
        "version": LAB_VERSION,
        "torch_build": claims.torch_build,
        "op_table_version": claims.op_table_version,
        "arithmetic_version": claims.arithmetic_version,
        "backend": claims.backend,
        "script": {"name": script.path.name, "sha256": format_digest(claims.script_digest),
                   "source": source.decode("utf-8")},
        "initial_state": claims.initial.to_dict(),
        "steps": steps,
    }  # fmt: skip
    body_bytes, envelope = sign_manifest(body, identity, LAB_SIGNATURE_DOMAIN)
    write_atomic(run_dir / MANIFEST_FILE, body_bytes)
    write_atomic(run_dir / SIGNATURE_FILE, canonical_json(envelope))
    return digest_bytes(body_bytes)


def train_lab_run(
    script_path: Path,
    run_dir: Path,
    steps: int,
    identity: Identity,
    *,
    backend: str,
    arithmetic: int | None,
    values: bool,
) -> tuple[LabClaims, bytes]:
    """Train the script `steps` steps under the lab mode and publish it to `run_dir`; (its claims, the run id)."""
    _check_empty(run_dir)  # before the training, not after it
    script = load_script(script_path)
    claims, states, batches = train_script(script, steps, backend=backend, arithmetic=arithmetic, values=values)
    return claims, publish_lab_run(run_dir, script, claims, states, batches, identity)


def _field(body: dict[str, object], key: str, kind: type[T], where: str) -> T:
    """body[key] when it is exactly of type `kind` (no bool for int); InputError naming the field otherwise."""
    value = body.get(key)
    if type(value) is not kind:
        raise InputError(f"{where}: field {key!r} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def _trace_lists(blob: bytes, where: str) -> tuple[tuple[bytes, ...], tuple[tuple[str, bytes], ...] | None]:
    """A step's trace file: its ops (ASCII lines) and its optional per-op value digests; InputError if malformed."""
    trace = parse_json(blob, where, MAX_TRACE_STRUCTURE)
    if not isinstance(trace, dict):
        raise InputError(f"{where}: a lab trace must be a JSON object")
    ops = _field(trace, "ops", list, where)
    if not all(isinstance(r, str) and r.isascii() for r in ops):
        raise InputError(f"{where}: field 'ops' must be a list of ASCII strings")
    vals = trace.get("values")
    if vals is None:
        return tuple(r.encode("ascii") for r in ops), None
    if not isinstance(vals, list) or not all(
        isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], str) for v in vals
    ):
        raise InputError(f"{where}: field 'values' must be null or a list of [name, digest] pairs")
    values = tuple((v[0], parse_digest(v[1], f"{where} values")) for v in vals)
    return tuple(r.encode("ascii") for r in ops), values


@dataclass(frozen=True)
class LabManifest:
    """A lab run's manifest, its signature and every field checked; nothing of the run loaded or run yet."""

    body_bytes: bytes
    run_id: bytes
    public_key: bytes
    script_name: str
    script_digest: bytes
    script_source: bytes  # the signed text, its SHA-256 `script_digest`
    torch_build: str
    op_table_version: int
    arithmetic_version: int
    backend: str
    initial: StateDigest
    states: tuple[StateDigest, ...]
    traces: tuple[bytes, ...]  # each step's trace digest
    trace_files: tuple[bytes, ...]  # the SHA-256 of each step's trace file
    batches: tuple[BatchClaim, ...]  # what each step trained on

    @property
    def num_steps(self) -> int:
        return len(self.states)

    def state(self, n: int) -> StateDigest:
        """The claimed digest of state n (0: the initial state)."""
        return self.initial if n == 0 else self.states[n - 1]


def _batch_claim(entry: dict[str, object], where: str) -> BatchClaim:
    """A step's "batch" entry: {"shape": [positive ints], "sha256": digest}; InputError naming `where` otherwise."""
    shape = entry.get("shape")
    if set(entry) != {"shape", "sha256"} or not isinstance(shape, list) or not all(type(d) is int for d in shape):
        raise InputError(f'{where} is not {{"shape": [ints], "sha256": digest}}')
    return BatchClaim(check_shape(tuple(shape), where), parse_digest(entry.get("sha256"), f"{where}.sha256"))


def lab_manifest_from_bytes(body_bytes: bytes, sig: bytes, where: str, sig_where: str) -> LabManifest:
    """Check a lab manifest's signature (under LAB_SIGNATURE_DOMAIN) and every field; InputError, one line
    naming `where` (or `sig_where`), when anything does not check out."""
    run_id, public_key, signature = parse_signature(sig, sig_where)
    if digest_bytes(body_bytes) != run_id:
        raise InputError(f"{where}: the run id in {sig_where} is not the SHA-256 of the manifest")
    if not verify_signature(public_key, signature, LAB_SIGNATURE_DOMAIN + body_bytes):
        raise InputError(f"{where}: the publisher's signature does not verify as a lab run manifest's")
    body = parse_json(body_bytes, where, MAX_MANIFEST_STRUCTURE)
    if not isinstance(body, dict) or body.get("format") != LAB_FORMAT or body.get("version") != LAB_VERSION:
        raise InputError(f"{where} is not a {LAB_FORMAT} v{LAB_VERSION} manifest")
    script_info = _field(body, "script", dict, where)
    script_digest = parse_digest(script_info.get("sha256"), f"{where} script.sha256")
    name, source = script_info.get("name"), script_info.get("source")
    if not isinstance(name, str) or not isinstance(source, str):
        raise InputError(f"{where}: field 'script' has no 'name' and 'source' strings")
    source_bytes = source.encode("utf-8", "surrogatepass")
    if digest_bytes(source_bytes) != script_digest:
        raise InputError(f"{where}: the script's source is not the text its sha256 names")
    states, traces, trace_files, batches = [], [], [], []
    for n, item in enumerate(_field(body, "steps", list, where)):
        if not isinstance(item, dict) or item.get("step") != n:
            raise InputError(f"{where}: steps[{n}] is not step {n}")
        at = f"{where} steps[{n}]"
        states.append(StateDigest.from_dict(item.get("state"), f"{at}.state"))
        traces.append(parse_digest(_field(item, "trace", str, at), f"{at}.trace"))
        trace_files.append(parse_digest(_field(item, "trace_file", str, at), f"{at}.trace_file"))
        batches.append(_batch_claim(_field(item, "batch", dict, at), f"{at}.batch"))
    initial = StateDigest.from_dict(body.get("initial_state"), f"{where} initial_state")
    for at, state in [("initial_state", initial)] + [(f"steps[{n}].state", s) for n, s in enumerate(states)]:
        if len(state.tensors) > MAX_STATE_TENSORS:
            raise InputError(
                f"{where} {at} has {len(state.tensors)} tensors, more than the {MAX_STATE_TENSORS} allowed"
            )
    return LabManifest(
        body_bytes, run_id, public_key, name, script_digest, source_bytes,
        _field(body, "torch_build", str, where), _field(body, "op_table_version", int, where),
        _field(body, "arithmetic_version", int, where), _field(body, "backend", str, where),
        initial, tuple(states), tuple(traces), tuple(trace_files), tuple(batches),
    )  # fmt: skip


@dataclass(frozen=True)
class LabRunView:
    """An opened lab run: its directory, script file, claims, publisher key and run id (SHA-256 of the manifest).

    Opening a run never runs its script: a replay runs it in a child process (audit.lab_isolation), and the
    process that judges the replay holds no code of the publisher's.

    `traced`: the steps whose trace files were read (every step, or those a partial view of a remote run
    holds); claims.trace_ops and claims.values are empty for the others, which are not replayed."""

    run_dir: Path
    script_path: Path  # its bytes checked against the signed SHA-256 when opened; never run in this process
    claims: LabClaims
    public_key: bytes
    run_id: bytes
    traced: range

    @property
    def num_steps(self) -> int:
        return len(self.claims.states)

    @property
    def label(self) -> str:
        return self.run_dir.name


def lab_publisher(run_dir: Path) -> bytes:
    """The public key the run's signature file names (unverified: to refuse an unwanted publisher early)."""
    sig = read_file(run_dir / SIGNATURE_FILE, "manifest signature", 4096, run_dir)
    return parse_signature(sig, run_dir / SIGNATURE_FILE)[1]


def read_lab_run(run_dir: Path) -> tuple[Path, LabClaims, bytes]:
    """Check the signature and every field; (the run's script file, its claims, the publisher's public key)."""
    view = open_lab_run(run_dir)
    return view.script_path, view.claims, view.public_key


def read_lab_manifest(run_dir: Path) -> LabManifest:
    """The run directory's manifest, its signature and fields checked (lab_manifest_from_bytes)."""
    body_bytes = read_file(run_dir / MANIFEST_FILE, "manifest", MAX_MANIFEST_BYTES, run_dir)
    sig = read_file(run_dir / SIGNATURE_FILE, "manifest signature", 4096, run_dir)
    return lab_manifest_from_bytes(body_bytes, sig, str(run_dir / MANIFEST_FILE), str(run_dir / SIGNATURE_FILE))


def open_lab_run(run_dir: Path, traced: range | None = None) -> LabRunView:
    """Check the signature and every field, read the trace files of the steps in `traced` (default: every
    step) against their SHA-256, then the script's bytes against theirs. The script is not run here."""
    m = read_lab_manifest(run_dir)
    steps = range(m.num_steps) if traced is None else traced
    if steps and not 0 <= steps[0] <= steps[-1] < m.num_steps:
        raise InputError(f"steps {steps[0]}..{steps[-1]} are not in the run (it has steps 0..{m.num_steps - 1})")
    ops: list[tuple[bytes, ...]] = [()] * m.num_steps
    values: list[tuple[tuple[str, bytes], ...] | None] = [None] * m.num_steps
    for n in steps:
        trace_file = run_dir / lab_trace_path(n)
        blob = read_file(trace_file, "lab trace", MAX_TRACE_FILE, run_dir)
        if digest_bytes(blob) != m.trace_files[n]:
            raise InputError(f"{trace_file}: its SHA-256 is not the manifest's")
        ops[n], values[n] = _trace_lists(blob, str(trace_file))
    script_path = run_dir / SCRIPT_FILE
    check_script_bytes(script_path, m.script_digest)
    claims = LabClaims(
        m.torch_build, m.op_table_version, m.arithmetic_version, m.backend, m.script_digest, m.initial,
        m.states, m.traces, tuple(ops), tuple(values), m.batches,
    )  # fmt: skip
    return LabRunView(run_dir, script_path, claims, m.public_key, m.run_id, steps)


def load_lab_state(run_dir: Path, claims: LabClaims | LabManifest, n: int) -> dict[str, np.ndarray]:
    """The checkpoint of state n, checked against the claimed digest."""
    expected = claims.initial if n == 0 else claims.states[n - 1]
    names = [name for name, _ in expected.tensors]
    return load_checkpoint(run_dir, n, expected, names)


def load_lab_batch(run_dir: Path, claims: LabClaims | LabManifest, n: int) -> np.ndarray:
    """The batch step n trained on, checked against its claimed shape and SHA-256."""
    claim = claims.batches[n]
    path = run_dir / lab_batch_path(n)
    return decode_batch(read_file(path, "lab batch", claim.size, run_dir), claim, str(path))
