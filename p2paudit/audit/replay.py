"""Replay a range of steps of a published run and compare every part of its claim.

Steps are 0-based: step n turns state n into state n + 1. Replaying steps
A..B starts from the nearest checkpoint at or before state A and replays
every step from there (the steps before A are checked too: they produce
step A's input). Every file is checked before use: the manifest (signature,
run id), the shards, and every checkpoint the range touches.

What a step's "match" means: the input state's step counter is n, the batch
the schedule draws is the claimed data digest, the replayed state is the
claimed state n + 1, and the replayed loss is the claimed loss, bit for bit.
A range that includes step 0 also rebuilds state 0 from the recipe (config,
seed, arithmetic) and compares it with the claimed state 0 (`init`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kernels import ARITHMETIC_VERSION
from p2paudit.audit.diagnosis import Diagnosis, compare_states, conclude, differing_names, first_divergence
from p2paudit.audit.records import ERROR, INIT, MATCH, MISMATCH, StepAudit, same_loss
from p2paudit.engine import ENGINE_VERSION
from p2paudit.engine.backends import load_backend, single_process_step
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.memory import check_fits, estimate_memory, plan_replay
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state, state_names, state_shapes
from p2paudit.engine.step import StepResult
from p2paudit.errors import InputError, InternalError
from p2paudit.identity import parse_public_key_hex
from p2paudit.run.checkpoint import CheckpointReader, load_checkpoint, open_checkpoint
from p2paudit.run.digest import digest_batch, digest_state, format_digest
from p2paudit.run.manifest import Manifest, read_manifest
from p2paudit.run.shards import load_tokens
from p2paudit.run.traces import TraceRecorder, load_trace

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


def check_checkpoints(view: RunView, first_state: int, last_state: int) -> dict[str, np.ndarray]:
    """Load and check every checkpoint of states first_state..last_state against the manifest.

    Precondition: first_state is a checkpointed state; its state is returned
    (the others are dropped after their check: at most two are held at once).
    """
    first = {}
    for c in view.manifest.checkpoints:
        if first_state <= c <= last_state:
            state = view.load_state(c)
            first = state if c == first_state else first
    return first


def second_backend(backend: str) -> str:
    """The backend a mismatch is bisected against: reference, or cpu when replaying with reference."""
    return "cpu" if backend == "reference" else "reference"


def audit_initial_state(view: RunView) -> StepAudit:
    """Rebuild state 0 from the recipe (config, seed; init uses no kernel backend) and compare its
    digest with the claimed state 0."""
    m = view.manifest
    began = time.perf_counter()
    observed = digest_state(init_state(view.cfg)).digest
    claimed = m.initial_state.digest
    same = observed == claimed
    note = "" if same else "the claimed state 0 is not what the recipe (config, seed) builds"
    return StepAudit(
        run_id=m.run_id,
        step=0,
        input_digest=None,
        claimed_data=None,
        observed_data=None,
        claimed_digest=claimed,
        observed_digest=observed,
        claimed_loss=None,
        observed_loss=None,
        findings=() if same else ("init",),
        verdict=MATCH if same else MISMATCH,
        backend="recipe",
        seconds=time.perf_counter() - began,
        note=note,
        engine_version=ENGINE_VERSION,
        arithmetic_version=ARITHMETIC_VERSION,
        subject=INIT,
    )


def verify_range(
    view: RunView,
    steps: StepRange,
    backend: str,
    on_audit: Callable[[StepAudit], None] | None = None,
    diagnose: bool = True,
    against: str | None = None,
    step_factory: Callable[[TrainConfig, str], Callable[..., StepResult]] = single_process_step,
) -> RangeReport:
    """Check `steps` with `backend`: the initial state if steps.init, then one StepAudit per step.

    Each step runs through `step_factory(cfg, backend)(state, batch)`: one process
    by default; audit.distributed_replay passes the step of one rank of a process
    group, and every rank then runs this same function in lock-step.
    A mismatching step is diagnosed (unless `diagnose` is false) by tracing it
    on `backend` and on `against` (default: second_backend(backend)), on one process.

    Every checkpoint of states in [start, last + 1] is checked first (InputError
    on any fault, before any step runs). After a step whose replayed state is
    not the published one, later steps are re-anchored at the next
    checkpoint, and steps before it get the verdict "error".
    """
    m = view.manifest
    state: dict = {}
    if steps.first is not None and steps.last is not None:
        step_fn = step_factory(view.cfg, backend)
        if diagnose:
            load_backend(against or second_backend(backend))
        start = m.nearest_checkpoint(steps.first)
        state = check_checkpoints(view, start, steps.last + 1)  # every file checked before any result
    audits: list[StepAudit] = []
    if steps.init:
        audits.append(audit_initial_state(view))
        if on_audit is not None:
            on_audit(audits[-1])
    if steps.first is None or steps.last is None:
        return RangeReport(tuple(audits), ())
    a, b = steps.first, steps.last
    anchored_note = ""  # empty while the replayed state is the published one
    diagnoses = []
    for n in range(start, b + 1):
        if anchored_note and n in m.checkpoints:
            state, anchored_note = view.load_state(n), ""
        began = time.perf_counter()
        audit, state, diagnosis = _replay_one(
            view, n, state, step_fn, backend, anchored_note, (against or second_backend(backend)) if diagnose else None
        )
        audit = replace(audit, seconds=time.perf_counter() - began)
        if not anchored_note and audit.observed_digest != audit.claimed_digest:
            anchored_note = f"input is not the published state {n + 1} (step {n} mismatched)"
        if diagnosis is not None and n >= a:
            diagnoses.append(diagnosis)
        if n >= a:
            audits.append(audit)
            if on_audit is not None:
                on_audit(audit)
    return RangeReport(tuple(audits), tuple(diagnoses))


def _replay_one(
    view: RunView, n: int, state: dict, step_fn, backend: str, unanchored: str, against: str | None
) -> tuple[StepAudit, dict, Diagnosis | None]:
    """Run step n from `state`; the audit (seconds filled in by the caller), new state, diagnosis."""
    m = view.manifest
    record = m.steps[n]
    base = audit_base(view, n, backend)
    if unanchored:  # running it would check nothing: its input is not the claimed one
        return (
            StepAudit(
                **base,
                observed_data=None,
                observed_digest=None,
                observed_loss=None,
                findings=(),
                verdict=ERROR,
                note=unanchored,
            ),
            state,
            None,
        )
    batch = batch_for_step(view.tokens, m.data.data_key, view.cfg, n)  # (M, B, T+1)
    counter = int(state["step"])
    result = step_fn(state, batch)
    observed = digest_state(result.state)
    audit = StepAudit(
        **base,
        observed_data=digest_batch(batch),
        observed_digest=observed.digest,
        observed_loss=float(result.loss),
        findings=(),
        verdict=MATCH,
    )
    findings, notes = compare_step(audit, counter, len(differing_names(record.output, observed)))
    diagnosis = None
    if "state" in findings and against:
        diagnosis = diagnose_step(view, n, state, batch, result.state, backend, against)
    verdict = MISMATCH if findings else MATCH
    return replace(audit, findings=findings, verdict=verdict, note="; ".join(notes)), result.state, diagnosis


def audit_base(view: RunView, n: int, backend: str) -> dict:
    """The StepAudit fields of step n known before it runs (what the manifest claims)."""
    m = view.manifest
    record = m.steps[n]
    return dict(
        run_id=m.run_id,
        step=n,
        input_digest=m.state_digest(n).digest,
        claimed_data=record.data_digest,
        claimed_digest=record.output.digest,
        claimed_loss=record.loss,
        backend=backend,
        seconds=0.0,
        engine_version=ENGINE_VERSION,
        arithmetic_version=ARITHMETIC_VERSION,
    )


def compare_step(audit: StepAudit, counter: int, tensors_differing: int) -> tuple[tuple[str, ...], list[str]]:
    """(findings in FINDINGS order, one note for each) for a replayed step."""
    findings, notes = [], []
    if counter != audit.step:
        findings.append("counter")
        notes.append(f"the input state's step counter is {counter}, not {audit.step}")
    if audit.observed_data != audit.claimed_data:
        findings.append("data")
        notes.append(
            f"data digest {format_digest(audit.observed_data)} is not the claimed "
            f"{format_digest(audit.claimed_data)}: the claim used another slice of data"
        )
    if audit.observed_digest != audit.claimed_digest:
        findings.append("state")
        notes.append(f"{tensors_differing} tensor(s) differ")
    if not same_loss(audit.observed_loss, audit.claimed_loss):
        findings.append("loss")
        notes.append(f"loss {audit.observed_loss!r} is not the claimed {audit.claimed_loss!r}")
    return tuple(findings), notes


def diagnose_step(
    view: RunView, n: int, state: dict, batch: np.ndarray, observed_state: dict, backend: str, other: str
) -> Diagnosis:
    """Name the differing tensors, measure them against the claimed checkpoint if there is one,
    and bisect the step's trace on two backends (and against the published trace, if any).

    Precondition: `state` is the published state n and step n's replay mismatched.
    """
    m = view.manifest
    claimed = m.steps[n].output
    names = differing_names(claimed, digest_state(observed_state))
    diffs = ()
    if n + 1 in m.checkpoints:
        claimed_state = view.load_state(n + 1)
        diffs = compare_states(claimed_state, observed_state, list(names))
    traces = {b: _trace_step(view, state, batch, b) for b in (backend, other)}
    divergences = [first_divergence(backend, traces[backend], other, traces[other])]
    if m.steps[n].trace is not None:
        published = load_trace(view.run_dir, n, m.steps[n].trace)
        divergences.append(first_divergence(backend, traces[backend], "published trace", published))
    return Diagnosis(n, names, diffs, tuple(divergences), conclude(tuple(divergences), (backend, other)))


def _trace_step(view: RunView, state: dict, batch: np.ndarray, backend: str) -> list[tuple[str, bytes]]:
    recorder = TraceRecorder()
    single_process_step(view.cfg, backend)(state, batch, recorder)
    return recorder.ops
