"""A published run opened for replay, the step ranges asked of it, and the report a replay gives.

The records every replay shares (audit.replay in memory, audit.streamed_replay
with bounded memory, audit.distributed_replay on W processes), and the checks
made before any step runs: the manifest (signature, run id), the shards, the
memory a replay needs, the publisher's key, the step range's text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from p2paudit.audit.diagnosis import Diagnosis
from p2paudit.audit.records import MATCH, MISMATCH, StepAudit
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.memory import check_fits, estimate_memory, plan_replay
from p2paudit.engine.state import state_names, state_shapes
from p2paudit.errors import InputError, InternalError
from p2paudit.identity import parse_public_key_hex
from p2paudit.run.checkpoint import CheckpointReader, load_checkpoint, open_checkpoint
from p2paudit.run.manifest import Manifest, read_manifest
from p2paudit.run.shards import load_tokens

# ASCII digits only (str.isdigit and \d accept other scripts' digits), at most 18 of them.
_RANGE = re.compile(r"^\s*([0-9]{1,18})\s*(?:-\s*([0-9]{1,18})\s*)?$", re.ASCII)
_RANGE_TEXT_LIMIT = 64
INIT_RANGE = "init"


@dataclass(frozen=True)
class RunView:
    """A published run, opened and checked: manifest, config, tokens, state tensor names."""

    run_dir: Path
    manifest: Manifest
    cfg: TrainConfig
    tokens: np.ndarray
    names: tuple[str, ...]

    def load_state(self, n: int) -> dict[str, np.ndarray]:
        """The published checkpoint of state n, every tensor's dtype and shape checked before it is read."""
        return load_checkpoint(self.run_dir, n, self.manifest.state_digest(n), list(self.names), state_shapes(self.cfg))

    def open_state(self, n: int, check_reads: bool = True) -> CheckpointReader:
        """The published checkpoint of state n, opened with its header checked; tensors are read on demand
        and (check_reads) each checked against the manifest's tensor digest as it is read."""
        digest, names, shapes = self.manifest.state_digest(n), list(self.names), state_shapes(self.cfg)
        return open_checkpoint(self.run_dir, n, digest, names, shapes, check_reads)


@dataclass(frozen=True)
class RangeReport:
    """The audits of the requested steps, and a diagnosis for each mismatch."""

    audits: tuple[StepAudit, ...]
    diagnoses: tuple[Diagnosis, ...]
    replay: str = "in-memory"  # or "streaming" (audit.streamed_replay)

    @property
    def all_match(self) -> bool:
        return all(a.verdict == MATCH for a in self.audits)

    @property
    def any_mismatch(self) -> bool:
        return any(a.verdict == MISMATCH for a in self.audits)


def open_run(run_dir: Path, ignore_memory: bool = False, mode: str = "auto") -> RunView:
    """Read and check the manifest and every shard of `run_dir`.

    Before any shard or checkpoint is loaded, the memory a replay of this
    config needs is estimated and checked against what the machine has
    (InputError, one line, unless `ignore_memory`): the in-memory replay's
    for `mode` "in-memory", else the streaming replay's (engine.memory.plan_replay).
    """
    if not run_dir.is_dir():
        raise InputError(f"run directory {run_dir} does not exist")
    manifest = read_manifest(run_dir)
    cfg = manifest.config  # parsed and checked with the manifest
    if cfg is None:
        raise InternalError(f"read_manifest returned no config for {run_dir}")
    if not ignore_memory:
        check_replay_fits(cfg, manifest.data.tokens, manifest.data.token_bytes, mode, f"the run in {run_dir}")
    tokens = load_tokens(run_dir, manifest.data)
    return RunView(run_dir, manifest, cfg, tokens, tuple(state_names(cfg)))


def check_replay_fits(cfg: TrainConfig, tokens: int, token_bytes: int, mode: str, what: str) -> None:
    """InputError (one line) unless a replay of `cfg` in `mode` fits in the memory available
    ("auto" needs what the streaming replay needs; see engine.memory.plan_replay)."""
    estimate = estimate_memory(cfg, tokens, token_bytes)
    plan_replay(estimate, mode)  # refuses an unknown mode
    need = estimate.replay if mode == "in-memory" else estimate.streaming_replay
    check_fits(need, f"replaying a step of {what} ({'in memory' if mode == 'in-memory' else 'streaming'})")


def check_publisher(view: RunView, key_hex: str) -> None:
    """InputError unless the run's manifest is signed by the public key `key_hex` (64 hex digits)."""
    want = parse_public_key_hex(key_hex)
    if view.manifest.public_key != want:
        raise InputError(
            f"manifest {view.run_dir / 'manifest.json'} is signed by {view.manifest.public_key.hex()}, "
            f"not by the expected publisher {want.hex()}"
        )


@dataclass(frozen=True)
class StepRange:
    """What to check: the initial state (`init`) and/or steps first..last (inclusive; None for none)."""

    init: bool
    first: int | None
    last: int | None


def parse_step_range(text: str, num_steps: int) -> StepRange:
    """ "init", "A-B" (inclusive) or "A" -> StepRange; InputError unless 0 <= A <= B < num_steps.

    A range that includes step 0 includes the initial state's check.
    """
    if len(text) > _RANGE_TEXT_LIMIT:
        raise InputError(f"step range has {len(text)} characters; want 'init', 'A-B' or 'A'")
    if text.strip() == INIT_RANGE:
        return StepRange(True, None, None)
    match = _RANGE.match(text)
    if match is None:
        raise InputError(f"step range {text!r} is not 'init', 'A-B' or 'A' with ASCII decimal integers A <= B")
    a = int(match.group(1))
    b = int(match.group(2)) if match.group(2) is not None else a
    if a > b:
        raise InputError(f"step range {text!r} runs backwards: {a} > {b}")
    if b >= num_steps:
        raise InputError(f"step {b} is outside the run: it has steps 0-{num_steps - 1}")
    return StepRange(a == 0, a, b)
