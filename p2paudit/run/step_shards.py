"""Which shards a range of steps reads, and the memory its replay needs: pure functions of the manifest.

Step n reads the windows `schedule.window_starts(data_key, cfg, n, tokens)`,
each seq_len + 1 consecutive tokens of the token stream. Every shard but the
last holds SHARD_TOKENS tokens, so token t lies in shard t // SHARD_TOKENS,
and a window (at most 8,193 tokens) lies in one shard or straddles two. A
replay of steps A..B runs steps c..B (c the nearest checkpoint <= A): the
shards it needs are those of the windows of steps c..B, computable before any
shard is read or fetched. The initial state's check (`init`) reads no window,
but is the one replay that loads every shard (to check the data key).
"""

from __future__ import annotations

from collections.abc import Iterable

from p2paudit.engine.config import TrainConfig
from p2paudit.engine.memory import estimate_memory, plan_replay
from p2paudit.engine.schedule import window_starts
from p2paudit.errors import InputError
from p2paudit.run.manifest import Manifest
from p2paudit.run.shards import SHARD_TOKENS


def _config(manifest: Manifest) -> TrainConfig:
    if manifest.config is None:
        raise InputError("manifest has no parsed config")
    return manifest.config


def replayed_steps(manifest: Manifest, first: int, last: int) -> range:
    """The steps a replay of first..last runs: from the nearest checkpoint at or before first."""
    return range(manifest.nearest_checkpoint(first), last + 1)


def shards_for_steps(manifest: Manifest, steps: Iterable[int]) -> tuple[int, ...]:
    """Indices (sorted, each once) of the shards holding a token of a window one of `steps` reads."""
    cfg = _config(manifest)
    T = cfg.model.seq_len
    need: set[int] = set()
    for n in steps:
        starts = window_starts(manifest.data.data_key, cfg, n, manifest.data.tokens).ravel()
        need.update((starts // SHARD_TOKENS).tolist())
        need.update(((starts + T) // SHARD_TOKENS).tolist())  # the window's last token
    return tuple(sorted(int(i) for i in need))


def shards_for_range(manifest: Manifest, first: int | None, last: int | None) -> tuple[int, ...]:
    """The shards a replay of steps first..last reads; every shard for None, None (`init`: the data key)."""
    if first is None or last is None:
        return tuple(range(len(manifest.data.shards)))
    return shards_for_steps(manifest, replayed_steps(manifest, first, last))


def replay_memory(manifest: Manifest, shards: Iterable[int], mode: str = "auto") -> int:
    """Bytes a replay of the manifest's config in `mode` ("in-memory"; "auto" or "streaming": what the
    streaming replay needs, as audit.replay.check_replay_fits counts it) needs holding the tokens of
    `shards` (engine.memory); InputError for an unknown mode."""
    data = manifest.data
    tokens = sum(data.shards[i].tokens for i in set(shards))
    estimate = estimate_memory(_config(manifest), tokens, data.token_bytes)
    plan_replay(estimate, mode)  # refuses an unknown mode
    return estimate.replay if mode == "in-memory" else estimate.streaming_replay
