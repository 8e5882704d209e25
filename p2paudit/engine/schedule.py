"""What step n reads and how fast it learns: pure functions of the manifest.

`batch_for_step` picks, for each micro-batch m of step n, batch_size windows of
seq_len + 1 consecutive tokens from the corpus. The window starts are uniform
on [0, len - seq_len - 1], drawn by rejection (no modulo bias) from the Philox
stream keyed by (data key, run seed) and counted by (step, m). The data key is
the raw 32-byte SHA-256 of the whole token stream (the manifest's
`data.data_key`), not the digest of one step's batch. `lr_at`
is a linear warmup, then a linear decay to min_lr, then min_lr, all in float32.
"""

from __future__ import annotations

import hashlib

import numpy as np

from p2paudit.engine import rng
from p2paudit.engine.config import OptimConfig, TrainConfig, check_sizes
from p2paudit.errors import InputError

BATCH_KEY_DOMAIN = b"p2paudit/batch-key/v1\x00"
# The name (and version) of batch_for_step as a run manifest records it in schedule.function.
SCHEDULE_FUNCTION = "p2paudit.engine.schedule.batch_for_step/v1"


def batch_key(data_key: bytes, seed: int) -> int:
    """The 64-bit Philox key of a run's batch stream.

    SHA-256(BATCH_KEY_DOMAIN || data_key as its raw bytes (32 for a run) ||
    u64 little-endian seed), the first 8 bytes read as a little-endian u64.
    """
    if not isinstance(data_key, bytes | bytearray) or len(data_key) == 0:
        raise InputError("data key must be non-empty bytes (the raw SHA-256 of the token stream)")
    if not 0 <= seed < 2**64:
        raise InputError(f"seed {seed} is outside [0, 2^64)")
    h = hashlib.sha256(BATCH_KEY_DOMAIN + bytes(data_key) + seed.to_bytes(8, "little")).digest()
    return int.from_bytes(h[:8], "little")


def window_starts(data_key: bytes, cfg: TrainConfig, step: int, n_tokens: int) -> np.ndarray:
    """(M, B) int64 start offsets of the windows step `step` reads, each in [0, n_tokens - T - 1].

    The sizes of `cfg` are checked first (config.check_sizes): a config built
    without from_dict cannot make this loop or allocate without bound.
    """
    check_sizes(cfg)
    T = cfg.model.seq_len
    if n_tokens < T + 1:
        raise InputError(f"corpus has {n_tokens} tokens, want at least seq_len + 1 = {T + 1}")
    if n_tokens - T > 2**32:
        raise InputError(f"corpus has {n_tokens} tokens, more than 2^32 + seq_len")
    if not 0 <= step < 2**32:
        raise InputError(f"step {step} is outside [0, 2^32)")
    key = batch_key(data_key, cfg.seed)
    rows = [
        rng.uniform_int(key, (rng.DOMAIN_BATCH, step, m), cfg.batch_size, n_tokens - T)
        for m in range(cfg.micro_batches)
    ]
    return np.stack(rows)  # (M, B)


def batch_for_step(tokens: np.ndarray, data_key: bytes, cfg: TrainConfig, step: int) -> np.ndarray:
    """(M, B, T+1) int64 token windows of step `step` (0-based) from the corpus `tokens`.

    `tokens`: uint8 byte tokens, or uint16/uint32 token ids (checked below vocab_size when loaded).
    """
    if not isinstance(tokens, np.ndarray) or tokens.dtype not in (np.uint8, np.uint16, np.uint32) or tokens.ndim != 1:
        raise InputError("corpus tokens must be a 1-d uint8, uint16 or uint32 array")
    if tokens.dtype == np.uint8 and int(cfg.model.vocab_size) < 256:
        raise InputError(f"byte tokens need vocab_size >= 256, the model has {cfg.model.vocab_size}")
    T = cfg.model.seq_len
    starts = window_starts(data_key, cfg, step, tokens.size)  # (M, B)
    idx = starts[:, :, None] + np.arange(T + 1, dtype=np.int64)  # (M, B, T+1)
    return tokens[idx].astype(np.int64)


def lr_at(step: int, optim: OptimConfig) -> np.float32:
    """The learning rate of update `step` (0-based: the number of updates done before it).

    warmup: lr * ((step + 1) / warmup_steps) for step < warmup_steps;
    decay:  lr - (lr - min_lr) * ((step - warmup_steps) / decay_steps) up to warmup + decay;
    after:  min_lr. Every operation is a rounded float32 operation.
    """
    if step < 0:
        raise InputError(f"step {step} is negative")
    lr, min_lr = np.float32(optim.lr), np.float32(optim.min_lr)
    warmup, decay = optim.warmup_steps, optim.decay_steps
    if step < warmup:
        return np.float32(lr * (np.float32(step + 1) / np.float32(warmup)))
    if step < warmup + decay:
        frac = np.float32(step - warmup) / np.float32(decay)
        return np.float32(lr - (lr - min_lr) * frac)
    return min_lr
