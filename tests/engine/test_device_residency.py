"""With the Triton backend a whole train step stays on the device: counted host<->device copies.

train_step moves the state (less its step counter, a host integer) and the
batch to the device once, and the new state and the loss back once; every op
between kernels is the backend's (docs/engine.md, "Where the arrays live").
This file, run as a script under TRITON_INTERPRET=1 (set before Triton is
imported, so in a subprocess), wraps every point where torch and numpy meet
(torch.from_numpy, torch.as_tensor, torch.tensor, Tensor.to, .cpu, .numpy,
.tolist, .item, __array__ and the scalar conversions) and records which
function asked, outside kernel launches (the interpreter copies each launch's
arguments to run it; on a GPU those are device pointers). It also records
every backend call made with numpy arrays. The tests hold the counts of one
step to exactly: state + batch up, state + loss down, plus the host scalar
vectors (eps, 1/N, AdamW's, ...) on a cold cache and none on a warm one; and
the new state must have the cpu backend's digest. Two planted violations (an
add that goes through numpy, index checks that read the tokens back) show
that the counts catch a round trip.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import shrunk_config, text_corpus

import kernels
from p2paudit.engine.config import TrainConfig
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step
from p2paudit.run.digest import digest_state

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
KEY = b"residency-test"

# Host scalar vectors one step uploads on a cold cache, for CONFIG's sizes
# (n_embd C = 64, N = B*T = 8 tokens, D = 16, M = 2; all distinct values):
# attention 1/sqrt(D); rmsnorm (C, eps); rmsnorm_backward (C); cross_entropy (N);
# cross_entropy_backward dloss/N; div_scalar M (gradients and loss);
# AdamW's eight for matrices and for gains (weight decay differs).
COLD_SCALAR_UPLOADS = 8


def residency_config():
    """The tiny config cut down for the interpreter: one layer, one sequence of 8, two micro-batches."""
    cfg = shrunk_config(micro_batches=2, seq_len=8)
    return dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, n_layer=1), batch_size=1)


def loss_bits(loss) -> int:
    """The bit pattern of a float32 loss."""
    return int(np.asarray(loss, dtype=np.float32).reshape(1).view(np.uint32)[0])


# ------------------------------------------------------- the subprocess side


class TransferCounter:
    """Records host<->device conversion calls as (what, asking function), outside kernel launches."""

    TO_TORCH = ("from_numpy", "as_tensor", "tensor")
    TENSOR_METHODS = ("to", "cpu", "numpy", "tolist", "item", "__array__", "__bool__", "__int__", "__float__")

    def __init__(self, torch, io, launch_module) -> None:
        self.torch, self.io, self.L = torch, io, launch_module
        self.events: Counter = Counter()
        self.in_launch = 0
        self.saved: list[tuple[object, str, object, bool]] = []

    def _record(self, what: str) -> None:
        if self.in_launch == 0:
            caller = sys._getframe(2).f_code.co_name
            self.events[f"{what} in {caller}"] += 1

    def _patch(self, owner, name: str, make) -> None:
        original = getattr(owner, name)
        self.saved.append((owner, name, original, name in vars(owner)))
        setattr(owner, name, make(original))

    def __enter__(self) -> TransferCounter:
        torch, counter = self.torch, self

        def counting(what):
            def make(original):
                def wrapper(*args, **kwargs):
                    counter._record(what)
                    return original(*args, **kwargs)

                return wrapper

            return make

        def launching(original):
            def wrapper(*args, **kwargs):
                counter.in_launch += 1
                try:
                    return original(*args, **kwargs)
                finally:
                    counter.in_launch -= 1

            return wrapper

        def torch_mode(original):
            def wrapper(*arrays):
                as_torch = original(*arrays)
                if not as_torch:
                    counter._record("numpy-mode call")
                return as_torch

            return wrapper

        for name in self.TO_TORCH:
            self._patch(torch, name, counting(name))
        for name in self.TENSOR_METHODS:
            self._patch(torch.Tensor, name, counting(name))
        self._patch(self.L, "launch", launching)
        self._patch(self.io, "torch_mode", torch_mode)
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original, own in reversed(self.saved):
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        self.saved.clear()


@contextlib.contextmanager
def plant(variant: str, tb, io):
    """Break residency on purpose while inside: an add through numpy, or index checks that read values back."""
    owner, name, replacement = {
        "none": (None, None, None),
        "add_through_numpy": (tb, "add", lambda a, b: tb.to_device(np.asarray(tb.to_host(a) + tb.to_host(b)))),
        "unknown_index_range": (io, "known_range", lambda t: None),
    }[variant]
    original = getattr(owner, name) if name else None
    if name:
        setattr(owner, name, replacement)
    try:
        yield
    finally:
        if name:
            setattr(owner, name, original)


def probe(cfg_json: str, corpus_path: str, variant: str) -> dict:
    """One step counted from a cold scalar cache, then (unplanted only) the same step again."""
    import torch

    from kernels import triton_backend as tb
    from kernels import triton_io as io
    from kernels import triton_launch as L

    cfg = TrainConfig.from_dict(json.loads(cfg_json))
    tokens = np.frombuffer(Path(corpus_path).read_bytes(), dtype=np.uint8)
    state, batch = init_state(cfg), batch_for_step(tokens, KEY, cfg, 0)
    runs = ["cold", "warm"] if variant == "none" else ["cold"]
    L.clear_scalar_cache()
    out: dict = {"float_tensors": sum(1 for n in state if n != "step")}
    for run in runs:
        with plant(variant, tb, io), TransferCounter(torch, io, L) as counter:
            result = train_step(state, batch, cfg, tb)
        out[run] = {
            "events": dict(counter.events),
            "digest": digest_state(result.state).text(),
            "loss_bits": loss_bits(result.loss),
            "state_is_numpy": all(isinstance(t, np.ndarray) for t in result.state.values()),
        }
    return out


# ------------------------------------------------------------- the tests


def expected_events(float_tensors: int, scalar_uploads: int) -> dict[str, int]:
    """The only conversions a step may make: state + batch up, state + loss down, scalar vectors up."""
    want = {
        "from_numpy in to_device": float_tensors + 1,  # the state's float tensors and the batch
        "to in to_device": float_tensors + 1,
        "cpu in to_host": float_tensors + 1,  # the new state's float tensors and the loss
        "numpy in to_host": float_tensors + 1,
        "from_numpy in device_scalars": scalar_uploads,
        "to in device_scalars": scalar_uploads,
    }
    return {k: v for k, v in want.items() if v}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    corpus = tmp_path_factory.mktemp("residency") / "corpus.bin"
    corpus.write_bytes(text_corpus().tobytes())
    cfg_json = json.dumps(residency_config().to_dict())
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), cfg_json, str(corpus)],
        capture_output=True, text=True, timeout=900, env=env, cwd=str(REPO),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def cpu_step() -> tuple[str, int]:
    cfg = residency_config()
    result = train_step(init_state(cfg), batch_for_step(text_corpus(), KEY, cfg, 0), cfg, kernels.get_backend("cpu"))
    return digest_state(result.state).text(), loss_bits(result.loss)


pytestmark = [pytest.mark.slow, pytest.mark.triton]


def test_one_step_moves_only_state_batch_and_loss(results):
    run = results["none"]
    assert run["cold"]["events"] == expected_events(run["float_tensors"], COLD_SCALAR_UPLOADS)


def test_a_repeated_step_uploads_no_scalars(results):
    run = results["none"]
    assert run["warm"]["events"] == expected_events(run["float_tensors"], 0)


def test_device_step_has_the_cpu_backends_bits(results, cpu_step):
    digest, want_bits = cpu_step
    for run in ("cold", "warm"):
        got = results["none"][run]
        assert got["state_is_numpy"]
        assert (got["digest"], got["loss_bits"]) == (digest, want_bits), run


@pytest.mark.parametrize("variant", ["add_through_numpy", "unknown_index_range"])
def test_a_planted_round_trip_is_counted(results, cpu_step, variant):
    run = results[variant]
    extra = Counter(run["cold"]["events"])
    extra.subtract(expected_events(results["none"]["float_tensors"], COLD_SCALAR_UPLOADS))
    assert any(n > 0 for n in extra.values()), f"{variant} went unnoticed: {run['cold']['events']}"
    assert run["cold"]["digest"] == cpu_step[0]  # same bits, only slower: counting is what catches it


if __name__ == "__main__":
    report = {v: probe(sys.argv[1], sys.argv[2], v) for v in ("none", "add_through_numpy", "unknown_index_range")}
    print(json.dumps(report))
