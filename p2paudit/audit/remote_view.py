"""Open a run directory that holds only the shards a range of steps reads (a remote run's local view).

`open_run` loads every shard and checks the data key. A remote run is fetched
piecewise (p2paudit.run.remote): its view holds the manifest, the checkpoints
and only the shards of the windows the replayed steps read
(run.step_shards.shards_for_range). `open_partial_run` checks the manifest,
computes the same shard set from it and the step range, checks the memory the
replay needs, and loads those shards (each against its digest in the manifest)
into a token array of the stream's full length whose other tokens are 0
(shards.load_token_subset). The replay reads tokens only through
batch_for_step's windows, which lie in those shards, so it draws the same
batches as from the whole stream.

The data key is SHA-256 of the whole stream: it is checked only when every
shard is loaded (`init`, or a range whose windows touch every shard); a
partial replay relies on the per-shard digests (docs/run-format.md, Remote runs).
"""

from __future__ import annotations

from pathlib import Path

from p2paudit.audit.replay import RunView, parse_step_range
from p2paudit.engine.memory import check_fits
from p2paudit.engine.state import state_names
from p2paudit.errors import InputError, InternalError
from p2paudit.run.manifest import read_manifest
from p2paudit.run.shards import load_token_subset, load_tokens
from p2paudit.run.step_shards import replay_memory, shards_for_range


def open_partial_run(run_dir: Path, steps: str, ignore_memory: bool = False, mode: str = "auto") -> RunView:
    """Read and check the manifest of `run_dir` and the shards that replaying `steps` ("A-B", "A",
    "init") reads; InputError (one line) if one is missing or wrong, or, unless `ignore_memory`,
    if the estimated memory of a replay in `mode` (as open_run counts it) exceeds what is available
    (checked before any shard is read).
    """
    if not run_dir.is_dir():
        raise InputError(f"run directory {run_dir} does not exist")
    manifest = read_manifest(run_dir)
    cfg = manifest.config
    if cfg is None:
        raise InternalError(f"read_manifest returned no config for {run_dir}")
    step_range = parse_step_range(steps, manifest.num_steps)
    indices = shards_for_range(manifest, step_range.first, step_range.last)
    if not ignore_memory:
        how = "in memory" if mode == "in-memory" else "streaming"
        need = replay_memory(manifest, indices, mode)
        check_fits(need, f"replaying steps {steps.strip()} of the run in {run_dir} ({how})")
    if len(indices) == len(manifest.data.shards):
        tokens = load_tokens(run_dir, manifest.data)  # every shard: the data key is checked too
    else:
        tokens = load_token_subset(run_dir, manifest.data, indices)
    return RunView(run_dir, manifest, cfg, tokens, tuple(state_names(cfg)))
