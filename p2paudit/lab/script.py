"""A lab's training script as p2paudit reads it: three functions, trained and replayed step by step.

A lab script is an ordinary Python file (examples/lab_gpt2.py, examples/lab_llama.py) defining

    build() -> (model, optimizer)         the model with its initial weights, AdamW(fused=True)
    batch(step) -> int64 tokens (B, T+1)   what step `step` trains on (run where the lab trains only: the
                                           batches are published, and a replay is given step n's)
    train_step(model, optimizer, tokens)   forward, loss, backward, clip, optimizer.step(), zero_grad()

`train_script` runs it under LabRun and returns the run's claims (LabClaims: the torch build, the op
table and arithmetic versions, the script's SHA-256, each step's state and trace digests and batch,
and optionally each op's value digests), every state, which a publisher keeps as checkpoints, and
every step's batch (p2paudit.lab.batch), which it publishes.
A replay (audit.lab_task, in a child process of audit.lab_isolation) rebuilds the model from the script,
loads the published state before a step (`load_state`) and runs it; `judge_replay`, in the parent,
compares: the op graph (a different trace is its own finding, named at its first departing op), then
the state. `check_build` refuses a run trained under another torch build before anything runs.

Preconditions: `train_script` and `load_script` run the script in this process (as `python script.py`
would): a publisher's, or a child's that replays one; never the process that judges a replay.
Nothing here writes files; the publisher and the CLI do (DESIGN: only run/ and cli/ touch disk).
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from p2paudit.errors import InputError
from p2paudit.lab.batch import BatchClaim, batch_array, batch_claim, tokens_tensor
from p2paudit.lab.refusal import OP_TABLE_VERSION
from p2paudit.lab.session import LabRun
from p2paudit.lab.trace import digest_records, first_departure, first_value_departure
from p2paudit.tensor_digest import StateDigest

INTERFACE = ("build", "batch", "train_step")


class TorchBuildMismatch(InputError):
    """A lab run replayed under another torch build than the one it was trained with (exit 2)."""


def torch_build() -> str:
    """This process's torch build: its version and the git commit it was built from."""
    return f"torch {torch.__version__} (git {torch.version.git_version})"


@dataclass(frozen=True)
class LabScript:
    """A loaded lab script: its bytes' SHA-256 and its three functions."""

    path: Path
    digest: bytes
    build: Callable[[], tuple[torch.nn.Module, torch.optim.Optimizer]]
    batch: Callable[[int], torch.Tensor]
    train_step: Callable[[torch.nn.Module, torch.optim.Optimizer, torch.Tensor], Any]


class _CheckedSource(importlib.abc.SourceLoader):
    """A loader that runs the bytes load_script read and checked: it never reads the file again."""

    def __init__(self, path: Path, source: bytes) -> None:
        self._path, self._source = path, source

    def get_filename(self, fullname: str) -> str:
        return str(self._path)

    def get_data(self, path: str) -> bytes:
        return self._source


def check_script_bytes(path: Path, expected_digest: bytes) -> None:
    """InputError unless the file at `path` is a regular file whose SHA-256 is `expected_digest` (nothing run)."""
    if not path.is_file():
        raise InputError(f"lab script {path}: not a regular file")
    if hashlib.sha256(path.read_bytes()).digest() != expected_digest:
        raise InputError(f"{path}: its SHA-256 is not the manifest's (the script was not run)")


def load_script(path: Path, expected_digest: bytes | None = None) -> LabScript:
    """Import the script at `path` as a module of its own; InputError naming what it lacks.

    With `expected_digest` (a published run's), the bytes are checked before any of them runs, and the
    bytes checked are the bytes executed (the file is read once): a script changed beside its signed
    manifest is refused, never run.
    """
    if not path.is_file():
        raise InputError(f"lab script {path}: not a regular file")
    source = path.read_bytes()
    digest = hashlib.sha256(source).digest()
    if expected_digest is not None and digest != expected_digest:
        raise InputError(f"{path}: its SHA-256 is not the manifest's (the script was not run)")
    spec = importlib.util.spec_from_file_location(
        f"p2paudit_lab_script_{digest.hex()[:16]}", path, loader=_CheckedSource(path, source)
    )
    if spec is None or spec.loader is None:
        raise InputError(f"lab script {path}: cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = [name for name in INTERFACE if not callable(getattr(module, name, None))]
    if missing:
        raise InputError(f"lab script {path} does not define {', '.join(missing)} (want build, batch, train_step)")
    return LabScript(path, digest, module.build, module.batch, module.train_step)


@dataclass(frozen=True)
class LabClaims:
    """What a lab publishes about a run of its script (the body of its manifest, signed by the run layer)."""

    torch_build: str
    op_table_version: int
    arithmetic_version: int
    backend: str
    script_digest: bytes
    initial: StateDigest
    states: tuple[StateDigest, ...]  # after each step
    traces: tuple[bytes, ...]  # each step's trace digest
    trace_ops: tuple[tuple[bytes, ...], ...]  # each step's trace records
    values: tuple[tuple[tuple[str, bytes], ...] | None, ...]
    batches: tuple[BatchClaim, ...]  # what each step trained on (p2paudit.lab.batch)


def train_script(
    script: LabScript, steps: int, *, backend: str = "cpu", arithmetic: int | None = None, values: bool = False
) -> tuple[LabClaims, list[dict[str, np.ndarray]], list[np.ndarray]]:
    """Train `steps` steps of the script; (claims, the states 0..steps as numpy arrays, each step's batch).

    Each step trains on its batch as a replay is given it (a new contiguous tensor of what `batch` returned),
    so that the two run the same ops."""
    model, opt = script.build()
    run = LabRun(model, opt, backend=backend, arithmetic=arithmetic, values=values)
    states = [run.state_arrays()]
    batches = []
    for i in range(steps):
        batches.append(batch_array(script.batch(i), i))
        tokens = tokens_tensor(batches[-1])
        with run.step(i):
            script.train_step(model, opt, tokens)
        states.append(run.state_arrays())
    claims = LabClaims(
        torch_build(), OP_TABLE_VERSION, run.arithmetic, backend, script.digest, run.initial,
        tuple(r.state for r in run.records), tuple(r.trace for r in run.records),
        tuple(r.ops for r in run.records), tuple(r.values for r in run.records),
        tuple(batch_claim(b) for b in batches),
    )  # fmt: skip
    return claims, states, batches


def load_state(model: torch.nn.Module, opt: torch.optim.Optimizer, state: dict[str, np.ndarray]) -> None:
    """Put a state (params/, opt/m/, opt/v/, step) into the model and its AdamW(fused=True)."""
    step = int(state["step"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(state[f"params/{name}"]))
            if step:
                opt.state[p] = {
                    "step": torch.tensor(float(step), dtype=torch.float32),
                    "exp_avg": torch.from_numpy(state[f"opt/m/{name}"].copy()),
                    "exp_avg_sq": torch.from_numpy(state[f"opt/v/{name}"].copy()),
                }


@dataclass(frozen=True)
class ReplayVerdict:
    """One replayed step: equal or not, and why (one line each); the replay's own trace and state digests."""

    step: int
    state_matches: bool
    trace_matches: bool
    findings: tuple[str, ...]
    observed_trace: bytes
    observed_state: bytes


def check_torch_build(claims: LabClaims) -> None:
    """TorchBuildMismatch unless this process runs the torch build the run was trained under."""
    check_build(claims.torch_build)


def check_build(run_build: str) -> None:
    """TorchBuildMismatch unless this process runs `run_build` (a run's torch build, as torch_build() names it)."""
    if run_build != torch_build():
        raise TorchBuildMismatch(
            f"the run was trained under {run_build}; this replay runs {torch_build()}: "
            "a lab run replays only under its own torch build"
        )


def judge_replay(
    claims: LabClaims,
    step: int,
    state: StateDigest,
    ops: list[bytes],
    values: list[tuple[str, bytes]] | None,
) -> ReplayVerdict:
    """The verdict on step `step` from what its replay produced: the state after it (digested by the caller
    from the replay's tensors), its trace records and, where kept, its value trace."""
    trace = digest_records(ops)
    findings = []
    trace_ok = trace == claims.traces[step]
    if not trace_ok:
        findings.append(first_departure(ops, list(claims.trace_ops[step])) or "the op sequence differs")
    state_ok = state.digest == claims.states[step].digest
    if not state_ok:
        theirs = claims.states[step].tensor_map()
        differing = [n for n, d in state.tensors if theirs.get(n) != d]
        findings.append(f"state after step {step} differs in {len(differing)} tensors: {', '.join(differing[:4])}")
        if trace_ok and values is not None and claims.values[step] is not None:
            departure = first_value_departure(values, list(claims.values[step] or ()))
            findings.append(departure or "every op's outputs match: the claimed state is not what they computed")
    return ReplayVerdict(step, state_ok, trace_ok, tuple(findings), trace, state.digest)
