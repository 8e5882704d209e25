"""State and data digests: SHA-256 over tensors by name, dtype, shape and bytes.

The tensor and state digests are p2paudit.tensor_digest's (a leaf, so that
p2paudit.lab writes the same format), re-exported here for run's users;
`digest_state` here hands a large state to the kernels' SHA-256 lanes
(kernels/cpu_sha256.py) where they are faster: the same bytes, the same digest.
Batch digest of a step (the manifest's `steps[n].data`): the tensor digest of
the step's (M, B, T+1) int64 batch under the name "batch". Not to be confused
with the data key (`data.data_key`): the plain SHA-256 of the whole token stream.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np

import kernels
from p2paudit import tensor_digest
from p2paudit.tensor_digest import (
    DIGEST_PREFIX,
    STATE_DOMAIN,
    TENSOR_DOMAIN,
    StateDigest,
    StateDigestDict,
    combine_tensor_digests,
    digest_tensor,
    format_digest,
    parse_digest,
)

LANES_MIN_BYTES = 32 << 20  # a state this large goes through the kernels' SHA-256 lanes where they are faster

__all__ = [
    "DIGEST_PREFIX",
    "STATE_DOMAIN",
    "TENSOR_DOMAIN",
    "StateDigest",
    "StateDigestDict",
    "combine_tensor_digests",
    "digest_state",
    "digest_tensor",
    "format_digest",
    "parse_digest",
    "digest_batch",
    "digest_bytes",
]


def digest_state(state: Mapping[str, np.ndarray]) -> StateDigest:
    """p2paudit.tensor_digest.digest_state: the same digest, through kernels.state_lanes() for a state of
    LANES_MIN_BYTES or more (a smaller one is not worth loading numba for)."""
    large = sum(np.asarray(a).nbytes for a in state.values()) >= LANES_MIN_BYTES
    return tensor_digest.digest_state(state, kernels.state_lanes() if large else None)


def digest_batch(batch: np.ndarray) -> bytes:
    """Raw data digest of one step's batch (the tensor digest named "batch")."""
    return digest_tensor("batch", batch)


def digest_bytes(data: bytes | memoryview) -> bytes:
    """Plain SHA-256 of a byte string (shards, files)."""
    return hashlib.sha256(data).digest()
