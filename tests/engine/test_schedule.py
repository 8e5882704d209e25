"""Batch order and learning rate: pure functions of (data digest, seed, step, micro-batch)."""

import dataclasses

import numpy as np
import pytest
from engine_helpers import text_corpus

from p2paudit.engine.config import train_config
from p2paudit.engine.schedule import batch_for_step, lr_at, window_starts
from p2paudit.errors import InputError

KEY = bytes(range(32))


def test_batch_is_a_pure_function_of_its_inputs():
    tokens, cfg = text_corpus(), train_config("tiny", seed=1)
    a = batch_for_step(tokens, KEY, cfg, 5)
    b = batch_for_step(tokens.copy(), bytes(KEY), cfg, 5)
    assert a.dtype == np.int64 and a.shape == (cfg.micro_batches, cfg.batch_size, cfg.model.seq_len + 1)
    assert np.array_equal(a, b)


def test_batch_changes_with_step_seed_key_and_micro_batch():
    tokens, cfg = text_corpus(), train_config("tiny", seed=1)
    base = window_starts(KEY, cfg, 5, tokens.size)
    assert not np.array_equal(base, window_starts(KEY, cfg, 6, tokens.size))
    assert not np.array_equal(base, window_starts(KEY, dataclasses.replace(cfg, seed=2), 5, tokens.size))
    assert not np.array_equal(base, window_starts(b"other digest", cfg, 5, tokens.size))
    assert not np.array_equal(base[0], base[1])
    # Micro-batch m's windows do not depend on how many micro-batches there are.
    wide = window_starts(KEY, dataclasses.replace(cfg, micro_batches=8), 5, tokens.size)
    assert np.array_equal(wide[: cfg.micro_batches], base)


def test_windows_are_corpus_slices_within_bounds():
    tokens, cfg = text_corpus(), train_config("tiny")
    T = cfg.model.seq_len
    starts = window_starts(KEY, cfg, 0, tokens.size)
    batch = batch_for_step(tokens, KEY, cfg, 0)
    assert starts.min() >= 0 and starts.max() <= tokens.size - T - 1
    for m, b in np.ndindex(starts.shape):
        s = int(starts[m, b])
        assert np.array_equal(batch[m, b], tokens[s : s + T + 1])


def test_every_start_is_reachable_on_a_short_corpus():
    cfg = train_config("tiny")
    n = cfg.model.seq_len + 4  # five possible starts
    seen = set()
    for step in range(20):
        seen.update(window_starts(KEY, cfg, step, n).ravel().tolist())
    assert seen == {0, 1, 2, 3}


def test_bad_corpus_and_step():
    cfg = train_config("tiny")
    with pytest.raises(InputError, match="corpus has 10 tokens, want at least seq_len \\+ 1 = 65"):
        batch_for_step(np.zeros(10, dtype=np.uint8), KEY, cfg, 0)
    with pytest.raises(InputError, match="uint8"):
        batch_for_step(np.zeros(100, dtype=np.int64), KEY, cfg, 0)
    with pytest.raises(InputError, match="step -1"):
        batch_for_step(np.zeros(100, dtype=np.uint8), KEY, cfg, -1)


def test_lr_schedule_values():
    o = train_config("tiny", steps=20).optim  # warmup 2, decay 18, lr 3e-3, min 3e-4
    assert (o.warmup_steps, o.decay_steps) == (2, 18)
    lr, lo = np.float32(3e-3), np.float32(3e-4)
    assert lr_at(0, o) == np.float32(lr * (np.float32(1) / np.float32(2)))
    assert lr_at(1, o) == lr
    assert lr_at(2, o) == lr
    assert lr_at(11, o) == np.float32(lr - (lr - lo) * (np.float32(9) / np.float32(18)))
    assert lr_at(20, o) == lo and lr_at(10_000, o) == lo
    values = [lr_at(s, o) for s in range(25)]
    assert all(isinstance(v, np.float32) for v in values)
    assert all(a >= b for a, b in zip(values[1:], values[2:], strict=False))
    assert abs(float(lr_at(19, o)) - (3e-3 - 2.7e-3 * 17 / 18)) < 1e-9


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "change, message",
    [
        (dict(micro_batches=2**40), "micro_batches is 1099511627776, want 1..65536"),
        (dict(batch_size=2**40), "batch_size is 1099511627776, want 1..65536"),
        (dict(batch_size=2**16, micro_batches=2**16), "tokens, more than the 4194304 allowed"),
    ],
)
def test_a_config_built_directly_cannot_make_the_schedule_loop_for_ever(change, message):
    # A TrainConfig that never went through from_dict is bounded by the schedule itself.
    cfg = dataclasses.replace(train_config("tiny"), **change)
    with pytest.raises(InputError, match=message):
        window_starts(KEY, cfg, 0, 10_000)
    with pytest.raises(InputError, match=message):
        batch_for_step(text_corpus(), KEY, cfg, 0)
