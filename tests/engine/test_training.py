"""The loss falls when the tiny model trains on real text."""

import numpy as np
from engine_helpers import text_corpus

import kernels
from p2paudit.engine.config import train_config
from p2paudit.engine.schedule import batch_for_step
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step

STEPS = 30


def test_loss_falls_on_real_text():
    backend = kernels.get_backend("cpu")  # no fallback: a missing or broken cpu backend fails here
    cfg = train_config("tiny", micro_batches=2, seed=11, steps=STEPS)
    tokens = text_corpus()
    state, losses = init_state(cfg), []
    for n in range(STEPS):
        result = train_step(state, batch_for_step(tokens, b"train-test", cfg, n), cfg, backend)
        state = result.state
        losses.append(float(result.loss))
    assert abs(losses[0] - np.log(256)) < 0.3  # near a uniform guess over bytes at init
    assert np.isfinite(losses).all()
    assert np.mean(losses[-5:]) < losses[0] - 1.5, f"losses: {[round(x, 2) for x in losses]}"
