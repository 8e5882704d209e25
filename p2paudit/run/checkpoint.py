"""Checkpoints: a training state in a safetensors file, checked against the manifest on load.

The safetensors metadata carries the magic and version of this format:
{"format": "p2paudit-checkpoint", "version": "1", "step": "<n>", "state_digest": "sha256:<hex>"}.
A checkpoint is only ever trusted after its recomputed state digest equals
the one the manifest records for that step.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Mapping

import numpy as np

from p2paudit.errors import InputError
from p2paudit.run.digest import StateDigest, digest_state
from p2paudit.run.storage import write_atomic

CHECKPOINT_FORMAT = "p2paudit-checkpoint"
CHECKPOINT_VERSION = "1"
_DTYPES = {"float32": "F32", "float64": "F64", "int64": "I64", "int32": "I32", "uint8": "U8", "bool": "BOOL"}


def checkpoint_path(step: int) -> str:
    """Relative path of the checkpoint holding the state after `step` (0: the initial state)."""
    return f"checkpoints/step-{step:08d}.safetensors"


def encode_checkpoint(step: int, state: Mapping[str, np.ndarray], digest: StateDigest) -> bytes:
    """The safetensors bytes of a checkpoint, byte-for-byte reproducible.

    Written here rather than by safetensors.save, whose header key order
    varies between calls: header JSON with sorted keys and no whitespace,
    padded with spaces to a multiple of 8 bytes; tensors laid out in name
    order, C-contiguous little-endian.
    """
    metadata = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "step": str(step),
                "state_digest": digest.text()}
    header: dict[str, object] = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name in sorted(state):
        array = state[name]
        if array.dtype.name not in _DTYPES:
            raise InputError(f"tensor {name}: dtype {array.dtype} cannot go into a checkpoint")
        # Not np.ascontiguousarray: it turns the 0-d step counter into shape (1,).
        data = array.astype(array.dtype.newbyteorder("<"), order="C", copy=False).tobytes(order="C")
        header[name] = {"dtype": _DTYPES[array.dtype.name], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def save_checkpoint(run_dir: Path, step: int, state: Mapping[str, np.ndarray], digest: StateDigest) -> Path:
    """Write the checkpoint of `step` atomically; `digest` must be `digest_state(state)`."""
    path = run_dir / checkpoint_path(step)
    write_atomic(path, encode_checkpoint(step, state, digest))
    return path


def load_checkpoint(run_dir: Path, step: int, expected: StateDigest, names: list[str]) -> dict[str, np.ndarray]:
    """Load the checkpoint of `step`, tensors in the order of `names`, checked against `expected`.

    Raises InputError naming the file if it is missing, truncated or corrupt,
    if its metadata is not this format or another step, if its tensor names
    are not `names`, or if its state digest is not `expected` (naming the
    tensors that differ).
    """
    path = run_dir / checkpoint_path(step)
    if not path.is_file():
        raise InputError(f"checkpoint {path} is missing")
    state, metadata = _read_safetensors(path)
    want = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "step": str(step),
            "state_digest": expected.text()}
    got = {k: metadata.get(k) for k in want}
    if got != want:
        raise InputError(f"checkpoint {path}: metadata {got} is not {want}")
    if sorted(state) != sorted(names):
        missing, extra = sorted(set(names) - set(state)), sorted(set(state) - set(names))
        raise InputError(f"checkpoint {path}: tensors missing {missing}, unexpected {extra}")
    state = {name: state[name] for name in names}
    observed = digest_state(state)
    if observed.digest != expected.digest:
        differ = differing_tensors(expected, observed)
        raise InputError(f"checkpoint {path}: state digest {observed.text()} is not the manifest's "
                         f"{expected.text()} (tensors differ: {', '.join(differ) or 'none; names or order'})")
    return state


def _read_safetensors(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            metadata = handle.metadata() or {}
            state = {name: handle.get_tensor(name) for name in handle.keys()}
    except Exception as exc:  # SafetensorError and friends: corrupt or truncated file
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"checkpoint {path} is not a valid safetensors file: {message}") from None
    return state, metadata


def differing_tensors(expected: StateDigest, observed: StateDigest) -> list[str]:
    """Names whose tensor digests differ, or that only one of the two states has."""
    a, b = expected.tensor_map(), observed.tensor_map()
    return sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))

