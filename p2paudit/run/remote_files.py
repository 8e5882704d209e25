"""What checking a range of steps of a published run needs, from its manifest alone: which files, how big at
most, and how each is checked (a pure plan: run.remote fetches it).

The shards holding the windows that steps c..B read (c the nearest
checkpoint <= A; run.step_shards computes them), each of exact size and file
digest; the checkpoints of states c..B+1, bounded by the config's shapes and
checked against the state digests; the published traces of steps c..B, if
any. The initial state alone (no range) needs every shard: its replay checks
the data key.
"""

from __future__ import annotations

from dataclasses import dataclass

from p2paudit.engine.state import state_names, state_shapes
from p2paudit.errors import InputError
from p2paudit.run.checkpoint import checkpoint_bound, checkpoint_path
from p2paudit.run.checkpoint_layout import Shapes
from p2paudit.run.digest import StateDigest
from p2paudit.run.manifest import Manifest
from p2paudit.run.step_shards import shards_for_range
from p2paudit.run.traces import MAX_TRACE_BYTES, trace_path


@dataclass(frozen=True)
class RemoteFile:
    """A file a range of steps needs: its path in the run, cache key, size bound, and how to check it."""

    path: str
    key: str
    max_bytes: int
    exact: bool  # max_bytes is the file's exact size (a shard)
    digest: bytes | None  # SHA-256 of the whole file, when the manifest has it (shards, traces)
    state: int | None = None  # the checkpoint's state index, checked against `expected`
    expected: StateDigest | None = None  # a checkpoint's claimed state digest (its tensors' names and digests)
    shapes: Shapes | None = None  # a checkpoint's tensor shapes and dtypes; None: as its header states them


def state_key(expected: StateDigest) -> str:
    """The cache key of a checkpoint holding the state `expected`."""
    return f"state-{expected.digest.hex()}"


def files_for_range(manifest: Manifest, first: int | None, last: int | None) -> list[RemoteFile]:
    """The files (besides the manifest) that checking steps first..last needs, as the replay reads them:
    the shards of the windows steps c..last read (step_shards.shards_for_range; c the nearest
    checkpoint <= first), the checkpoints of states c..last+1, the traces of steps c..last.
    None, None: the initial state alone (every shard: its replay checks the data key)."""
    cfg = manifest.config
    if cfg is None:
        raise InputError("manifest has no parsed config")
    shards = [manifest.data.shards[i] for i in shards_for_range(manifest, first, last)]
    files = [
        RemoteFile(s.path, f"shard-{s.digest.hex()}", manifest.data.shard_bytes(s), True, s.digest) for s in shards
    ]
    if first is None or last is None:
        return files
    start = manifest.nearest_checkpoint(first)
    bound = checkpoint_bound(state_shapes(cfg), len(state_names(cfg)))
    for c in manifest.checkpoints:
        if start <= c <= last + 1:
            key = state_key(manifest.state_digest(c))
            expected = manifest.state_digest(c)
            files.append(RemoteFile(checkpoint_path(c), key, bound, False, None, c, expected, state_shapes(cfg)))
    for n in range(start, last + 1):
        trace = manifest.steps[n].trace
        if trace is not None:
            files.append(RemoteFile(trace_path(n), f"trace-{trace.hex()}", MAX_TRACE_BYTES, False, trace))
    return files
