"""State and data digests: SHA-256 over tensors by name, dtype, shape and bytes.

The tensor and state digests are p2paudit.tensor_digest's (a leaf, so that
p2paudit.lab writes the same format), re-exported here for run's users.
Batch digest of a step (the manifest's `steps[n].data`): the tensor digest of
the step's (M, B, T+1) int64 batch under the name "batch". Not to be confused
with the data key (`data.data_key`): the plain SHA-256 of the whole token stream.
"""

from __future__ import annotations

import hashlib

import numpy as np

from p2paudit.tensor_digest import (
    DIGEST_PREFIX,
    STATE_DOMAIN,
    TENSOR_DOMAIN,
    StateDigest,
    StateDigestDict,
    combine_tensor_digests,
    digest_state,
    digest_tensor,
    format_digest,
    parse_digest,
)

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


def digest_batch(batch: np.ndarray) -> bytes:
    """Raw data digest of one step's batch (the tensor digest named "batch")."""
    return digest_tensor("batch", batch)


def digest_bytes(data: bytes | memoryview) -> bytes:
    """Plain SHA-256 of a byte string (shards, files)."""
    return hashlib.sha256(data).digest()
