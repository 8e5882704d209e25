"""verify_range with bounded memory: the replay of runs whose state does not fit in memory several times.

Same loop, checks and verdicts as audit.replay.verify_range (both are
audit.range_driver's), and the same observed digests and losses
(tests/audit/test_streamed_replay.py holds them equal), computed by
engine.streaming through the StreamedRunner here:

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

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from kernels.backend_contract import Backend
from p2paudit.audit.diagnosis import Diagnosis, TensorDiff, compare_tensor, differing_names
from p2paudit.audit.range_driver import StepOutcome, report_range
from p2paudit.audit.records import StepAudit
from p2paudit.audit.replay import RangeReport, RunView, StepRange, verify_range
from p2paudit.engine.backends import load_backend
from p2paudit.engine.memory import available_bytes, estimate_memory, plan_replay
from p2paudit.engine.progress import ProgressHook
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import state_shapes
from p2paudit.errors import InternalError
from p2paudit.run.checkpoint import CheckpointReader, CheckpointWriter, checkpoint_path, open_checkpoint
from p2paudit.run.digest import StateDigest, digest_batch
from p2paudit.run.spill import scratch_directory
from p2paudit.run.streamed_step import grad_store, stream_step

STREAMING = "streaming"
NO_BISECT = (
    "the streaming replay does not hold a whole state, so it does not bisect the step's trace; "
    "rerun this step with --replay in-memory where it fits to find the first operation that departs"
)


class StreamedRunner:
    """range_driver.StepRunner that streams each step from one checkpoint file to the next: the input is
    the published checkpoint, or the previous step's output in a scratch directory under `scratch_dir`
    (made by begin, removed by close)."""

    def __init__(self, view: RunView, backend: str, scratch_dir: Path, spill: bool) -> None:
        self._view, self._backend, self._scratch_dir, self._spill = view, backend, scratch_dir, spill
        self._files = ExitStack()
        self._scratch = Path()
        self._be: Backend[Any] | None = None
        self._last_state = 0
        self._source: tuple[Path, StateDigest] | None = None  # the replayed input state, when not the published one

    def __enter__(self) -> StreamedRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self._files.close()

    def begin(self, start: int, last_state: int) -> None:
        m = self._view.manifest
        self._be = load_backend(self._backend, m.arithmetic)
        for c in m.checkpoints:
            if start <= c <= last_state:
                with self._view.open_state(c, check_reads=False) as reader:
                    reader.verify(m.state_digest(c))
        self._last_state = last_state
        self._scratch = self._files.enter_context(scratch_directory(self._scratch_dir, "replay-"))

    def anchor(self, n: int) -> None:
        self._source = None

    def replay(self, n: int, progress: ProgressHook | None) -> StepOutcome:
        view, be = self._view, self._be
        if be is None:
            raise InternalError("StreamedRunner.replay before begin")
        keep = self._scratch if n + 1 < self._last_state else None
        batch = batch_for_step(view.tokens, view.manifest.data.data_key, view.cfg, n)
        diffs: list[TensorDiff] = []
        with ExitStack() as stack:
            reader = stack.enter_context(self._open_input(n))
            explain = self._explainer(n, stack, diffs)
            writer = None
            if keep is not None:
                path = keep / checkpoint_path(n + 1)
                writer = stack.enter_context(CheckpointWriter(path, n + 1, state_shapes(view.cfg)))
            store = stack.enter_context(grad_store(self._scratch, self._spill))
            stepped = stream_step(reader, batch, view.cfg, be, store, writer, explain, progress=progress)
        if self._source is not None:
            self._source[0].unlink(missing_ok=True)
        self._source = (self._scratch / checkpoint_path(n + 1), stepped.output) if keep is not None else None
        output = stepped.output

        def diagnose() -> Diagnosis:
            diffs.sort(key=lambda d: d.name)
            return Diagnosis(n, differing_names(view.manifest.steps[n].output, output), tuple(diffs), (), NO_BISECT)

        return StepOutcome(stepped.counter, digest_batch(batch), output, stepped.loss, diagnose)

    def _open_input(self, n: int) -> CheckpointReader:
        if self._source is None:
            return self._view.open_state(n)
        path, digest = self._source
        names, shapes = list(self._view.names), state_shapes(self._view.cfg)
        return open_checkpoint(path.parent.parent, n, digest, names, shapes, True)

    def _explainer(
        self, n: int, stack: ExitStack, diffs: list[TensorDiff]
    ) -> Callable[[str, np.ndarray, bytes], None] | None:
        """An on_tensor hook comparing each new tensor whose digest is not the claimed one with the
        published checkpoint of state n + 1 (None when state n + 1 is not checkpointed)."""
        m = self._view.manifest
        if n + 1 not in m.checkpoints:
            return None
        published_next = stack.enter_context(self._view.open_state(n + 1))
        claimed = m.steps[n].output.tensor_map()

        def explain(name: str, array: np.ndarray, digest: bytes) -> None:
            if digest != claimed.get(name):
                diffs.append(compare_tensor(name, published_next.read(name), array))

        return explain


def verify_range_streamed(
    view: RunView,
    steps: StepRange,
    backend: str,
    scratch_dir: Path,
    spill: bool = True,
    on_audit: Callable[[StepAudit], None] | None = None,
    *,
    progress: ProgressHook | None = None,
) -> RangeReport:
    """Check `steps` as audit.replay.verify_range does, holding at most the parameters, one gradient
    set and one micro-batch's activations; scratch files go in a fresh directory under `scratch_dir`.
    `progress`: as for verify_range."""
    with StreamedRunner(view, backend, scratch_dir, spill) as runner:
        return report_range(view, steps, backend, runner, on_audit, STREAMING, progress)


def verify_range_planned(
    view: RunView,
    steps: StepRange,
    backend: str,
    mode: str,
    scratch_dir: Path,
    on_audit: Callable[[StepAudit], None] | None = None,
    diagnose: bool = True,
    against: str | None = None,
    *,
    progress: ProgressHook | None = None,
) -> RangeReport:
    """verify_range in memory, or verify_range_streamed when `mode` asks for it or ("auto") when the
    in-memory replay would not fit in the memory available now (engine.memory.plan_replay)."""
    data = view.manifest.data
    plan = plan_replay(estimate_memory(view.cfg, data.tokens, data.token_bytes), mode, available_bytes())
    if not plan.streaming:
        return verify_range(
            view, steps, backend, on_audit=on_audit, diagnose=diagnose, against=against, progress=progress
        )
    return verify_range_streamed(view, steps, backend, scratch_dir, plan.spill, on_audit, progress=progress)
