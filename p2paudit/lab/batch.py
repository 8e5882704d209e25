"""What a lab step trains on, as published: the tokens `batch(step)` returned, fixed as bytes and a SHA-256.

A lab reads its data where it keeps it (files, a dataset library, the network); a verifier replays the
step in a sandbox that holds none of that. So the publisher's run records each step's batch, and a
replay trains on the published batch, never calling `batch`: a match means the signed script computes
the claimed state n + 1 from the published state n on the published batch n (which the manifest signs).

A batch is int64 tokens, any shape of 1 to 4 dimensions, at most MAX_BATCH_BYTES; its bytes are the
array's in C order, little-endian.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np
import torch

from p2paudit.errors import InputError

MAX_BATCH_BYTES = 1 << 30
MAX_BATCH_DIMS = 4


@dataclass(frozen=True)
class BatchClaim:
    """A published batch: its shape, and the SHA-256 of its bytes (batch_bytes)."""

    shape: tuple[int, ...]
    digest: bytes

    @property
    def size(self) -> int:
        """The length of its bytes."""
        return math.prod(self.shape) * 8


def check_shape(shape: tuple[int, ...], where: str) -> tuple[int, ...]:
    """`shape` if a batch may have it (1 to 4 positive dimensions, at most MAX_BATCH_BYTES); InputError otherwise."""
    if not 1 <= len(shape) <= MAX_BATCH_DIMS or any(d < 1 for d in shape) or math.prod(shape) * 8 > MAX_BATCH_BYTES:
        raise InputError(
            f"{where}: a batch of shape {list(shape)} is not 1 to {MAX_BATCH_DIMS} positive dimensions of at most "
            f"{MAX_BATCH_BYTES} bytes of int64"
        )
    return shape


def batch_array(tokens: object, step: int) -> np.ndarray:
    """What `batch(step)` returned, as a new C-ordered little-endian int64 array; InputError (one line) for
    anything else than int64 tokens on the CPU (a torch tensor or a numpy array)."""
    where = f"batch({step})"
    if isinstance(tokens, torch.Tensor):
        if tokens.device.type != "cpu" or tokens.dtype != torch.int64:
            raise InputError(
                f"{where} returned a {tokens.dtype} tensor on {tokens.device} (want int64 tokens on the CPU)"
            )
        array = tokens.detach().contiguous().numpy()
    elif isinstance(tokens, np.ndarray):
        if tokens.dtype != np.int64:
            raise InputError(f"{where} returned a {tokens.dtype} array (want int64 tokens)")
        array = tokens
    else:
        raise InputError(f"{where} returned {type(tokens).__name__} (want int64 tokens, a torch tensor or numpy array)")
    check_shape(tuple(array.shape), where)
    return np.ascontiguousarray(array, dtype="<i8").copy()


def batch_bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array, dtype="<i8").tobytes()


def batch_claim(array: np.ndarray) -> BatchClaim:
    return BatchClaim(tuple(int(d) for d in array.shape), hashlib.sha256(batch_bytes(array)).digest())


def decode_batch(blob: bytes, claim: BatchClaim, where: str) -> np.ndarray:
    """The tokens a published batch holds; InputError unless `blob` has the claimed size and SHA-256."""
    if len(blob) != claim.size:
        raise InputError(
            f"{where} has {len(blob)} bytes, not the {claim.size} of its claimed shape {list(claim.shape)}"
        )
    if hashlib.sha256(blob).digest() != claim.digest:
        raise InputError(f"{where}: its SHA-256 is not the manifest's")
    return np.frombuffer(blob, dtype="<i8").reshape(claim.shape).astype(np.int64)


def tokens_tensor(array: np.ndarray) -> torch.Tensor:
    """The tensor `train_step` is given for a batch: a new contiguous int64 tensor of its tokens, made the same
    way where the lab trains and where a replay runs (before the step: what makes it is not in the trace)."""
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.int64).copy())
