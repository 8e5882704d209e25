"""Checkpoints: a training state in a safetensors file, checked against the manifest on load.

The safetensors metadata carries the magic and version of this format:
{"format": "p2paudit-checkpoint", "version": "1", "step": "<n>", "state_digest": "sha256:<hex>"}.
A checkpoint is only ever trusted after its recomputed state digest equals
the one the manifest records for that step.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from safetensors import safe_open

from p2paudit.engine.config import MAX_PARAMS
from p2paudit.errors import InputError
from p2paudit.regular_files import regular_size
from p2paudit.run.digest import StateDigest, digest_state
from p2paudit.run.storage import write_atomic

CHECKPOINT_FORMAT = "p2paudit-checkpoint"
CHECKPOINT_VERSION = "1"
HEADER_ALLOWANCE = 64 * 1024  # safetensors header bytes allowed beyond 256 per tensor
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
    metadata = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "step": str(step),
        "state_digest": digest.text(),
    }
    header: dict[str, object] = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name in sorted(state):
        array = state[name]
        if array.dtype.name not in _DTYPES:
            raise InputError(f"tensor {name}: dtype {array.dtype} cannot go into a checkpoint")
        # Not np.ascontiguousarray: it turns the 0-d step counter into shape (1,).
        data = array.astype(array.dtype.newbyteorder("<"), order="C", copy=False).tobytes(order="C")
        header[name] = {
            "dtype": _DTYPES[array.dtype.name],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
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


def checkpoint_bound(shapes: Mapping[str, tuple[tuple[int, ...], np.dtype]] | None, count: int) -> int:
    """The largest checkpoint file accepted: its tensors' bytes (or the config bounds' worst case) plus a header."""
    if shapes is None:
        data = 3 * MAX_PARAMS * 4 + 8  # params and two moments, float32, and the step counter
    else:
        data = sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in shapes.values())
    return 8 + HEADER_ALLOWANCE + 256 * count + data


def load_checkpoint(
    run_dir: Path,
    step: int,
    expected: StateDigest,
    names: list[str],
    shapes: Mapping[str, tuple[tuple[int, ...], np.dtype]] | None = None,
) -> dict[str, np.ndarray]:
    """Load the checkpoint of `step`, tensors in the order of `names`, checked against `expected`.

    The file must be a regular file inside `run_dir` (no link, FIFO or device)
    no larger than checkpoint_bound; with `shapes` (engine.state.state_shapes),
    every tensor's dtype and shape is checked from the header before any is read.
    Raises InputError naming the file if it is missing, truncated or corrupt,
    if its metadata is not this format or another step, if its tensor names
    are not `names`, or if its state digest is not `expected` (naming the
    tensors that differ).
    """
    path = run_dir / checkpoint_path(step)
    regular_size(path, "checkpoint", run_dir, checkpoint_bound(shapes, len(names)))
    state, metadata = _read_safetensors(path, names, shapes)
    want = {
        "format": CHECKPOINT_FORMAT,
        "version": CHECKPOINT_VERSION,
        "step": str(step),
        "state_digest": expected.text(),
    }
    got = {k: metadata.get(k) for k in want}
    if got != want:
        raise InputError(f"checkpoint {path}: metadata {got} is not {want}")
    state = {name: state[name] for name in names}
    observed = digest_state(state)
    if observed.digest != expected.digest:
        differ = differing_tensors(expected, observed)
        raise InputError(
            f"checkpoint {path}: state digest {observed.text()} is not the manifest's "
            f"{expected.text()} (tensors differ: {', '.join(differ) or 'none; names or order'})"
        )
    return state


def _read_safetensors(
    path: Path, names: list[str], shapes: Mapping[str, tuple[tuple[int, ...], np.dtype]] | None
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    try:
        with safe_open(str(path), framework="numpy") as handle:
            metadata = handle.metadata() or {}
            present = list(handle.keys())
            if sorted(present) != sorted(names):
                missing, extra = sorted(set(names) - set(present)), sorted(set(present) - set(names))
                raise InputError(f"checkpoint {path}: tensors missing {missing[:4]}, unexpected {extra[:4]}")
            for name in names if shapes is not None else ():
                shape, dtype = shapes[name]
                found = handle.get_slice(name)
                got = (tuple(found.get_shape()), found.get_dtype())
                if got != (tuple(shape), _DTYPES[np.dtype(dtype).name]):
                    raise InputError(
                        f"checkpoint {path}: tensor {name} is {got[1]} {list(got[0])}, want "
                        f"{_DTYPES[np.dtype(dtype).name]} {list(shape)}"
                    )
            state = {name: handle.get_tensor(name) for name in names}
    except InputError:
        raise
    except Exception as exc:  # SafetensorError and friends: corrupt or truncated file
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(f"checkpoint {path} is not a valid safetensors file: {message}") from None
    return state, metadata


def differing_tensors(expected: StateDigest, observed: StateDigest) -> list[str]:
    """Names whose tensor digests differ, or that only one of the two states has."""
    a, b = expected.tensor_map(), observed.tensor_map()
    return sorted(n for n in set(a) | set(b) if a.get(n) != b.get(n))
