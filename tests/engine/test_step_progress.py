"""The step core reports its progress (engine.progress) as it works, and a hook changes no bit."""

import dataclasses

import numpy as np
import pytest

import kernels
from p2paudit.engine.config import train_config
from p2paudit.engine.progress import StepProgress
from p2paudit.engine.state import init_state, param_shapes
from p2paudit.engine.step import train_step
from p2paudit.engine.streaming import streamed_step
from p2paudit.run.digest import digest_state
from p2paudit.run.spill import DiskGradStore

CPU = kernels.get_backend("cpu")


def config(name: str, micro_batches: int):
    """The preset's layers and parameters; `small` with one short sequence, so the test stays quick."""
    cfg = train_config(name, micro_batches=micro_batches)
    if name == "small":
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, seq_len=8), batch_size=1)
    return cfg


def state_and_batch(cfg):
    rng = np.random.default_rng(cfg.micro_batches)
    shape = (cfg.micro_batches, cfg.batch_size, cfg.model.seq_len + 1)
    return init_state(cfg), rng.integers(0, cfg.model.vocab_size, size=shape).astype(np.int64)


def contract_events(micro_batches: int, layers: int, params: int) -> list[StepProgress]:
    """engine.progress's docstring, spelled out: each layer (forward and backward), each finished
    micro-batch, each parameter's update."""
    events = []
    for m in range(micro_batches):
        events += [StepProgress("micro-batch", m, micro_batches, done, layers) for done in range(1, layers + 1)]
        events.append(StepProgress("micro-batch", m + 1, micro_batches, 0, layers))
    events += [StepProgress("update", micro_batches, micro_batches, 0, layers, k, params) for k in range(1, params + 1)]
    return events


@pytest.mark.parametrize("name, micro_batches", [("tiny", 4), ("small", 2)])
def test_train_step_reports_every_layer_micro_batch_and_update(name, micro_batches):
    cfg = config(name, micro_batches)
    state, batch = state_and_batch(cfg)
    seen: list[StepProgress] = []
    watched = train_step(state, batch, cfg, CPU, progress=seen.append)
    unwatched = train_step(state, batch, cfg, CPU)
    assert digest_state(watched.state) == digest_state(unwatched.state)
    assert watched.loss.tobytes() == unwatched.loss.tobytes()
    assert seen == contract_events(micro_batches, 2 * cfg.model.n_layer, len(param_shapes(cfg.model)))
    fractions = [event.fraction() for event in seen]
    assert 0.0 < fractions[0] and fractions[-1] == 1.0
    assert all(a <= b for a, b in zip(fractions, fractions[1:]))


def test_the_streamed_step_reports_as_train_step_does(tmp_path):
    cfg = config("tiny", 4)
    state, batch = state_and_batch(cfg)
    state = train_step(state, batch, cfg, CPU).state  # non-zero moments
    want_events: list[StepProgress] = []
    want = train_step(state, batch, cfg, CPU, progress=want_events.append)
    params = {k: v for k, v in state.items() if k.startswith("params/")}
    seen: list[StepProgress] = []
    got: dict[str, np.ndarray] = {}
    with DiskGradStore(tmp_path) as store:
        loss = streamed_step(
            params,
            int(state["step"]),
            lambda n: (state["opt/m/" + n], state["opt/v/" + n]),
            batch,
            got.__setitem__,
            cfg,
            CPU,
            store,
            progress=seen.append,
        )
    assert digest_state(got) == digest_state(want.state) and loss.tobytes() == want.loss.tobytes()
    assert seen == want_events
