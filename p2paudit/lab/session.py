"""LabRun: a lab's own PyTorch loop, one canonical step at a time, with its state and trace digests.

    run = LabRun(model, optimizer, backend="cpu")  # or "reference", "triton"; arithmetic: kernels.ARITHMETIC_VERSION unless given
    for i in range(steps):
        with run.step(i):
            loss = loss_fn(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
    run.records[i].state   # StateDigest of params, AdamW moments and step counter after step i
    run.records[i].trace   # the step's dataflow-trace digest (p2paudit.lab.trace)
    run.initial            # StateDigest of the state before step 0 (moments zero, step 0)

The state is named as the built-in engine's is (params/<name>, opt/m/<name>,
opt/v/<name>, step) and digested in p2paudit.tensor_digest's format.
Preconditions (checked, LabOpRefused otherwise): the optimizer is
torch.optim.AdamW with fused=True and no amsgrad, maximize, capturable or
differentiable; it holds only the model's parameters; the model is not a
torch.compile'd module; steps are numbered 0, 1, 2, ... in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

import kernels
from kernels import lab_math
from p2paudit.errors import InputError
from p2paudit.lab.mode import CanonicalMode
from p2paudit.lab.refusal import LabOpRefused
from p2paudit.lab.trace import Tracer
from p2paudit.tensor_digest import StateDigest, digest_state


@dataclass(frozen=True)
class StepRecord:
    """What one canonical step left: its index, the state digest after it, its trace digest and records."""

    step: int
    state: StateDigest
    trace: bytes
    ops: tuple[bytes, ...]
    values: tuple[tuple[str, bytes], ...] | None  # per op (name, output digest) when the run keeps values


def _is_compiled(model: torch.nn.Module) -> bool:
    return type(model).__name__ == "OptimizedModule" or hasattr(model, "_orig_mod")


def check_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Refuse every optimizer but plain AdamW(fused=True)."""
    if type(optimizer) is not torch.optim.AdamW:
        raise LabOpRefused(f"optimizer {type(optimizer).__name__} is not in op table 1 (it has torch.optim.AdamW)")
    for g in optimizer.param_groups:
        bad = [k for k in ("amsgrad", "maximize", "capturable", "differentiable", "foreach") if g.get(k)]
        if bad:
            raise LabOpRefused(f"AdamW with {', '.join(bad)} is not in op table 1 (it has plain AdamW, fused=True)")
        if not g.get("fused"):
            raise LabOpRefused("AdamW without fused=True is not in op table 1 (pass fused=True: one canonical update)")


class LabRun:
    """A lab's model and AdamW trained under CanonicalMode; `records` holds one StepRecord per step."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        backend: str = "cpu",
        arithmetic: int | None = None,
        first_step: int = 0,
        values: bool = False,
    ) -> None:
        if _is_compiled(model):
            raise LabOpRefused("a torch.compile'd model is not in op table 1 (its kernels bypass dispatch)")
        if backend not in kernels.BACKENDS:
            raise LabOpRefused(f"backend {backend!r}: the lab mode runs on {', '.join(kernels.BACKENDS)}")
        check_optimizer(optimizer)
        self.model, self.optimizer = model, optimizer
        if arithmetic is None:
            arithmetic = kernels.ARITHMETIC_VERSION  # what a new run uses
        try:  # triton needs CUDA or TRITON_INTERPRET=1: its modules refuse to import without
            self.backend = kernels.get_backend(backend, arithmetic)
            self.math = lab_math.for_backend(backend)
        except ImportError as exc:
            raise InputError(f"backend {backend} is not available here: {exc}") from None
        self.backend_name, self.arithmetic = backend, arithmetic
        self.names = {id(p): n for n, p in model.named_parameters()}
        for g in optimizer.param_groups:
            for p in g["params"]:
                if id(p) not in self.names:
                    raise LabOpRefused(
                        f"the optimizer holds a tensor of shape {tuple(p.shape)} that is not the model's"
                    )
        self.records: list[StepRecord] = []
        self.first_step, self.keep_values = first_step, values
        self.last_mode: CanonicalMode | None = None
        # SHA-256 of sixteen tensors a vector instruction where that beats hashlib here: the same digests
        self.lanes = kernels.state_lanes()
        self.initial = digest_state(self.state_arrays(copy=False), self.lanes)  # state 0: what a replay starts from

    def _named_tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        for p in self.model.parameters():
            name = self.names[id(p)]
            yield f"params/{name}", p
            if p.grad is not None:
                yield f"grad/{name}", p.grad
            st = self.optimizer.state.get(p, {})
            for key, label in (("exp_avg", "opt/m"), ("exp_avg_sq", "opt/v"), ("step", "opt/step")):
                if key in st:
                    yield f"{label}/{name}", st[key]

    def state_arrays(self, copy: bool = True) -> dict[str, np.ndarray]:
        """The training state as the engine names it: params, AdamW moments (zeros before step 1), step.

        `copy=False` gives views of the live tensors (to digest them now, not to keep).
        """
        state: dict[str, np.ndarray] = {}
        steps = set()
        for p in self.model.parameters():
            name = self.names[id(p)]
            state[f"params/{name}"] = p.detach().numpy().copy() if copy else p.detach().numpy()
            st = self.optimizer.state.get(p, {})
            for key, label in (("exp_avg", "opt/m"), ("exp_avg_sq", "opt/v")):
                if key not in st:  # np.zeros: calloc's untouched pages, where zeros_like writes every one
                    state[f"{label}/{name}"] = np.zeros(tuple(p.shape), state[f"params/{name}"].dtype)
                else:
                    moment = st[key].detach().numpy()
                    state[f"{label}/{name}"] = moment.copy() if copy else moment
            steps.add(int(st["step"].item()) if "step" in st else 0)
        if len(steps) > 1:
            raise LabOpRefused(f"the parameters have taken different numbers of steps {sorted(steps)}")
        state["step"] = np.array(steps.pop() if steps else 0, dtype=np.int64)
        return state

    @contextmanager
    def step(self, i: int) -> Iterator[CanonicalMode]:
        """Run the body (forward, backward, clip, optimizer.step) under CanonicalMode as step `i`."""
        if i != self.first_step + len(self.records):
            want = self.first_step + len(self.records)
            raise LabOpRefused(f"step {i} out of order: the next step of this run is {want}")
        tracer = Tracer(values=[] if self.keep_values else None)
        for name, t in self._named_tensors():
            tracer.name(t, name)
        mode = CanonicalMode(self.backend, tracer, self.math)
        with mode:
            yield mode
        self.last_mode = mode
        state = digest_state(self.state_arrays(copy=False), self.lanes)
        values = tuple(tracer.values) if tracer.values is not None else None
        self.records.append(StepRecord(i, state, tracer.digest(), tuple(tracer.records), values))
