"""One streamed step between checkpoint files: read state n, write (and digest) state n + 1.

The file side of engine.streaming, shared by the streaming replay
(audit.streamed_replay) and the streaming publisher (run.streamed_training):
the input state's parameters are read whole and its moments one parameter
at a time from a CheckpointReader; every new tensor is digested as it is
made, handed to `on_tensor` and written by a CheckpointWriter, then dropped.
Also: state 0 written tensor by tensor, never whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernels.backend_contract import Backend
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.progress import ProgressHook
from p2paudit.engine.state import init_param, param_shapes, state_shapes
from p2paudit.engine.streaming import GradStore, MemoryGradStore, streamed_step
from p2paudit.run.checkpoint import CheckpointReader, CheckpointWriter, checkpoint_path
from p2paudit.run.digest import StateDigest, combine_tensor_digests, digest_tensor
from p2paudit.run.spill import DiskGradStore

TensorHook = Callable[[str, np.ndarray, bytes], None]


@dataclass(frozen=True)
class StreamedStep:
    """What a streamed step gives: the new state's digest, the loss, the input's step counter."""

    output: StateDigest
    loss: np.float32
    counter: int


class DigestingSink:
    """Digests each tensor handed to it, passes it on to `on_tensor` and `writer`, keeps only the digests."""

    def __init__(self, writer: CheckpointWriter | None = None, on_tensor: TensorHook | None = None) -> None:
        self._writer = writer
        self._on_tensor = on_tensor
        self._digests: dict[str, bytes] = {}

    def __call__(self, name: str, array: np.ndarray) -> None:
        digest = self._digests[name] = digest_tensor(name, array)
        if self._on_tensor is not None:
            self._on_tensor(name, array, digest)
        if self._writer is not None:
            self._writer.write(name, array)

    def digest(self) -> StateDigest:
        ordered = tuple(sorted(self._digests.items(), key=lambda item: item[0].encode("utf-8")))
        return StateDigest(combine_tensor_digests(ordered), ordered)


@contextmanager
def grad_store(scratch: Path, spill: bool) -> Iterator[GradStore]:
    """Where a streamed step's partial sums wait: a DiskGradStore in `scratch` (closed on exit) when
    `spill`, else a MemoryGradStore."""
    if not spill:
        yield MemoryGradStore()
        return
    with DiskGradStore(scratch) as store:
        yield store


def stream_step(
    reader: CheckpointReader,
    batch: np.ndarray,
    cfg: TrainConfig,
    backend: Backend[Any],
    store: GradStore,
    writer: CheckpointWriter | None = None,
    on_tensor: TensorHook | None = None,
    *,
    progress: ProgressHook | None = None,
) -> StreamedStep:
    """Run the step on `batch` from the state `reader` holds; with `writer`, the new state is written
    and finished (file in place) before this returns. `progress`: engine.progress's events."""
    sink = DigestingSink(writer, on_tensor)
    counter = int(reader.read("step"))
    params = {"params/" + p: reader.read("params/" + p) for p in param_shapes(cfg.model)}

    def moments(name: str) -> tuple[np.ndarray, np.ndarray]:
        return reader.read("opt/m/" + name), reader.read("opt/v/" + name)

    loss = streamed_step(params, counter, moments, batch, sink, cfg, backend, store, progress=progress)
    del params
    output = sink.digest()
    if writer is not None:
        writer.finish(output)
    return StreamedStep(output, loss, counter)


def write_initial_state(run_dir: Path, cfg: TrainConfig) -> StateDigest:
    """Checkpoint 0 of `cfg` (engine.state.init_state's tensors, bit for bit) written one tensor at a time."""
    with CheckpointWriter(run_dir / checkpoint_path(0), 0, state_shapes(cfg)) as writer:
        sink = DigestingSink(writer)
        for tensor_id, (name, shape) in enumerate(param_shapes(cfg.model).items()):
            sink("params/" + name, init_param(cfg.model, name, shape, tensor_id, cfg.seed))
            sink("opt/m/" + name, np.zeros(shape, np.float32))
            sink("opt/v/" + name, np.zeros(shape, np.float32))
        sink("step", np.array(0, dtype=np.int64))
        digest = sink.digest()
        writer.finish(digest)
    return digest
