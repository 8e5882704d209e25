"""verify_range with bounded memory: the replay of runs whose state does not fit in memory several times.

Same checks, same verdicts and the same observed digests and losses as
audit.replay.verify_range (tests/audit/test_streamed_replay.py holds them
equal), computed by engine.streaming:

- every published checkpoint of states start..last + 1 is checked first, one
  tensor at a time (its digest against the manifest), before any step runs;
- a step reads its input state's parameters whole and its moments one
  parameter at a time, from the published checkpoint or, inside a range, from
  the previous step's output, written to the scratch directory;
- the new state is digested tensor by tensor as the update makes it; a tensor
  whose digest is not the claimed one is compared with the published
  checkpoint's right then (when there is one), so a mismatch is still
  explained tensor by tensor without ever holding a whole state;
- partial gradient sums wait in a DiskGradStore in the scratch directory
  when `spill` is true (in memory otherwise).

Not done here: the trace bisection of a mismatch (it re-runs the step whole
on two backends); the diagnosis says so, and `--replay in-memory` does it where the
step fits.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path

import numpy as np

from p2paudit.audit.diagnosis import Diagnosis, TensorDiff, compare_tensor, differing_names
from p2paudit.audit.records import ERROR, MATCH, MISMATCH, StepAudit
from p2paudit.audit.replay import (
    RangeReport,
    RunView,
    StepRange,
    audit_base,
    audit_initial_state,
    compare_step,
    verify_range,
)
from p2paudit.engine.backends import load_backend
from p2paudit.engine.memory import available_bytes, estimate_memory, plan_replay
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import state_shapes
from p2paudit.engine.streaming import GradStore, MemoryGradStore
from p2paudit.run.checkpoint import CheckpointWriter, checkpoint_path, open_checkpoint
from p2paudit.run.digest import StateDigest, digest_batch
from p2paudit.run.spill import DiskGradStore, scratch_directory
from p2paudit.run.streamed_step import stream_step

STREAMING = "streaming"
NO_BISECT = (
    "the streaming replay does not hold a whole state, so it does not bisect the step's trace; "
    "rerun this step with --replay in-memory where it fits to find the first operation that departs"
)


def verify_range_streamed(
    view: RunView,
    steps: StepRange,
    backend: str,
    scratch_dir: Path,
    spill: bool = True,
    on_audit: Callable[[StepAudit], None] | None = None,
) -> RangeReport:
    """Check `steps` as audit.replay.verify_range does, holding at most the parameters, one gradient
    set and one micro-batch's activations; scratch files go in a fresh directory under `scratch_dir`."""
    m = view.manifest
    audits: list[StepAudit] = []
    if steps.first is not None and steps.last is not None:
        be = load_backend(backend)
        start = m.nearest_checkpoint(steps.first)
        for c in m.checkpoints:  # every file checked before any result
            if start <= c <= steps.last + 1:
                with view.open_state(c, check_reads=False) as reader:
                    reader.verify(m.state_digest(c))
    if steps.init:
        audits.append(audit_initial_state(view))
        if on_audit is not None:
            on_audit(audits[-1])
    if steps.first is None or steps.last is None:
        return RangeReport(tuple(audits), (), STREAMING)
    diagnoses = []
    with scratch_directory(scratch_dir, "replay-") as scratch:
        source: tuple[Path, StateDigest] | None = None  # the replayed input state, when not the published one
        anchored_note = ""
        for n in range(start, steps.last + 1):
            if anchored_note and n in m.checkpoints:
                source, anchored_note = None, ""
            began = time.perf_counter()
            if anchored_note:
                audit = StepAudit(
                    **audit_base(view, n, backend),
                    observed_data=None,
                    observed_digest=None,
                    observed_loss=None,
                    findings=(),
                    verdict=ERROR,
                    note=anchored_note,
                )
                diagnosis = None
            else:
                keep = scratch if n < steps.last else None
                with _GradStore(scratch, spill) as store:
                    audit, observed, diagnosis = _replay_one(view, n, source, keep, be, backend, store)
                if source is not None:
                    source[0].unlink(missing_ok=True)
                source = (scratch / checkpoint_path(n + 1), observed) if keep is not None else None
                if audit.observed_digest != audit.claimed_digest:
                    anchored_note = f"input is not the published state {n + 1} (step {n} mismatched)"
            audit = replace(audit, seconds=time.perf_counter() - began)
            if n >= steps.first:
                audits.append(audit)
                diagnoses += [diagnosis] if diagnosis is not None else []
                if on_audit is not None:
                    on_audit(audit)
    return RangeReport(tuple(audits), tuple(diagnoses), STREAMING)


def verify_range_planned(
    view: RunView,
    steps: StepRange,
    backend: str,
    mode: str,
    scratch_dir: Path,
    on_audit: Callable[[StepAudit], None] | None = None,
    diagnose: bool = True,
    against: str | None = None,
) -> RangeReport:
    """verify_range in memory, or verify_range_streamed when `mode` asks for it or ("auto") when the
    in-memory replay would not fit in the memory available now (engine.memory.plan_replay)."""
    data = view.manifest.data
    plan = plan_replay(estimate_memory(view.cfg, data.tokens, data.token_bytes), mode, available_bytes())
    if not plan.streaming:
        return verify_range(view, steps, backend, on_audit=on_audit, diagnose=diagnose, against=against)
    return verify_range_streamed(view, steps, backend, scratch_dir, plan.spill, on_audit)


class _GradStore:
    """A DiskGradStore in `scratch` when spilling, else a MemoryGradStore; closed on exit."""

    def __init__(self, scratch: Path, spill: bool) -> None:
        self._store: GradStore = DiskGradStore(scratch) if spill else MemoryGradStore()

    def __enter__(self) -> GradStore:
        return self._store

    def __exit__(self, *exc: object) -> None:
        if isinstance(self._store, DiskGradStore):
            self._store.close()


def _replay_one(
    view: RunView,
    n: int,
    source: tuple[Path, StateDigest] | None,
    keep: Path | None,
    be,
    backend: str,
    store: GradStore,
) -> tuple[StepAudit, StateDigest, Diagnosis | None]:
    """Step n from the published state n (source None) or the replayed one; its output is written
    under `keep` (for the next step) when given. Returns the audit, the output digest, a diagnosis."""
    m, cfg = view.manifest, view.cfg
    record = m.steps[n]
    claimed = record.output.tensor_map()
    shapes = state_shapes(cfg)
    batch = batch_for_step(view.tokens, m.data.data_key, cfg, n)
    diffs: list[TensorDiff] = []
    with ExitStack() as stack:
        if source is None:
            reader = stack.enter_context(view.open_state(n))
        else:
            path, digest = source
            reader = stack.enter_context(open_checkpoint(path.parent.parent, n, digest, list(view.names), shapes, True))
        published_next = stack.enter_context(view.open_state(n + 1)) if n + 1 in m.checkpoints else None
        writer = stack.enter_context(CheckpointWriter(keep / checkpoint_path(n + 1), n + 1, shapes)) if keep else None

        def explain(name: str, array: np.ndarray, digest: bytes) -> None:
            if digest != claimed.get(name) and published_next is not None:
                diffs.append(compare_tensor(name, published_next.read(name), array))

        done = stream_step(reader, batch, cfg, be, store, writer, explain)
    audit = StepAudit(
        **audit_base(view, n, backend),
        observed_data=digest_batch(batch),
        observed_digest=done.output.digest,
        observed_loss=float(done.loss),
        findings=(),
        verdict=MATCH,
    )
    differing = differing_names(record.output, done.output)
    findings, notes = compare_step(audit, done.counter, len(differing))
    diagnosis = None
    if "state" in findings:
        diffs.sort(key=lambda d: d.name)
        diagnosis = Diagnosis(n, differing, tuple(diffs), (), NO_BISECT)
    audit = replace(audit, findings=findings, verdict=MISMATCH if findings else MATCH, note="; ".join(notes))
    return audit, done.output, diagnosis
