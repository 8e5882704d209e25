"""Operation traces: the digest of every operation's output in a step, in execution order.

A trace file `traces/step-<n:08d>.json` is canonical JSON:
{"format": "p2paudit-trace", "version": 1, "step": n, "ops": [[op_name, "sha256:<hex>"], ...]}
where each digest is the tensor digest (see digest.py) of the op's output
under the op's name. The manifest's step record names the file's SHA-256.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from p2paudit.errors import InputError
from p2paudit.run.digest import digest_bytes, digest_tensor, format_digest, parse_digest
from p2paudit.run.storage import parse_json, read_file

TRACE_FORMAT = "p2paudit-trace"
TRACE_VERSION = 1
MAX_TRACE_BYTES = 64 * 1024 * 1024
# json_structure of a trace file (run.storage): an honest op costs 3 (engine) or 4 (lab, with its value) and
# at least 80 bytes, so no honest trace within MAX_TRACE_BYTES comes near; what is refused is a file that
# would parse into many small objects (64 MiB of `{},`: 1.6 GiB of them)
MAX_TRACE_STRUCTURE = 4_000_000


def trace_path(step: int) -> str:
    """Relative path of the published trace of `step`."""
    return f"traces/step-{step:08d}.json"


@dataclass
class TraceRecorder:
    """A callable for the engine's `trace=` hook that keeps (op name, output digest) pairs."""

    ops: list[tuple[str, bytes]] = field(default_factory=list)

    def __call__(self, name: str, value: np.ndarray) -> None:
        self.ops.append((name, digest_tensor(name, np.asarray(value))))


def encode_trace(step: int, ops: list[tuple[str, bytes]]) -> bytes:
    """Canonical JSON bytes of a trace file."""
    body = {
        "format": TRACE_FORMAT,
        "version": TRACE_VERSION,
        "step": step,
        "ops": [[name, format_digest(d)] for name, d in ops],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def load_trace(run_dir: Path, step: int, expected_digest: bytes) -> list[tuple[str, bytes]]:
    """Read the published trace of `step`, checked against the manifest's file digest.

    The file must be a regular file inside `run_dir` of at most MAX_TRACE_BYTES.
    """
    path = run_dir / trace_path(step)
    blob = read_file(path, "trace", MAX_TRACE_BYTES, run_dir)
    if digest_bytes(blob) != expected_digest:
        raise InputError(
            f"trace {path}: digest {format_digest(digest_bytes(blob))} is not the manifest's "
            f"{format_digest(expected_digest)}"
        )
    body = parse_json(blob, f"trace {path}", MAX_TRACE_STRUCTURE)
    if (
        not isinstance(body, dict)
        or set(body) != {"format", "version", "step", "ops"}
        or body["format"] != TRACE_FORMAT
        or type(body["version"]) is not int
        or body["version"] != TRACE_VERSION
        or type(body["step"]) is not int
        or body["step"] != step
        or not isinstance(body["ops"], list)
    ):
        raise InputError(f"trace {path} is not a {TRACE_FORMAT} v{TRACE_VERSION} file for step {step}")
    ops = []
    for i, item in enumerate(body["ops"]):
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str):
            raise InputError(f"trace {path}: ops[{i}] must be [name, digest]")
        ops.append((item[0], parse_digest(item[1], f"trace {path} ops[{i}]")))
    return ops
