"""Configs: named presets, exact JSON round trips, strict parsing."""

import dataclasses
import json

import pytest

from p2paudit.engine.config import CONFIGS, ModelConfig, TrainConfig, train_config
from p2paudit.engine.state import count_params
from p2paudit.errors import InputError


def test_presets_have_the_promised_sizes():
    assert 100_000 <= count_params(CONFIGS["tiny"]) <= 500_000
    assert 9_000_000 <= count_params(CONFIGS["small"]) <= 12_000_000
    assert CONFIGS["tiny"].vocab_size == 256


def test_round_trip_through_json():
    for name in CONFIGS:
        cfg = train_config(name, micro_batches=8, seed=2**64 - 1, steps=123)
        assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


def test_steps_set_the_schedule():
    cfg = train_config("tiny", steps=50)
    assert cfg.optim.warmup_steps + cfg.optim.decay_steps == 50


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda d: d.update(extra=1), "unknown key"),
        (lambda d: d.pop("seed"), "lacks key"),
        (lambda d: d.update(seed="7"), "seed is a str"),
        (lambda d: d.update(micro_batches=3), "power of two"),
        (lambda d: d["model"].update(n_head=5), "multiple of n_head"),
        (lambda d: d["model"].update(tied_head=1), "tied_head is a int"),
        (lambda d: d["model"].update(n_layer=True), "n_layer is a bool"),
        (lambda d: d["optim"].update(beta1=1.5), "betas"),
        (lambda d: d["optim"].pop("lr"), "optim lacks key"),
        (lambda d: d.update(model=[1]), "model is a list"),
    ],
)
def test_from_dict_rejects_bad_input(mutate, message):
    d = train_config("tiny").to_dict()
    mutate(d)
    with pytest.raises(InputError, match=message):
        TrainConfig.from_dict(d)


def test_unknown_name_and_bad_steps():
    with pytest.raises(InputError, match="unknown config 'huge'"):
        train_config("huge")
    with pytest.raises(InputError, match="steps is 0"):
        train_config("tiny", steps=0)


# Resource bombs: every size is bounded before anything is allocated or looped over.
@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda d: d["model"].update(n_layer=10**9), "model n_layer is 1000000000, want 1..64"),
        (lambda d: d["model"].update(n_layer=1e9), "n_layer is a float, want int"),
        (lambda d: d["model"].update(n_embd=16384, n_head=4), "model n_embd is 16384, want 1..8192"),
        (lambda d: d["model"].update(vocab_size=2**17 + 1), "vocab_size is 131073, want 1..131072"),
        (lambda d: d["model"].update(seq_len=8193), "seq_len is 8193, want 1..8192"),
        (lambda d: d["model"].update(mlp_mult=10**6), "mlp_mult is 1000000, want 1..16"),
        (lambda d: d["model"].update(n_layer=64, n_embd=8192, n_head=64), "parameters, more than the 2147483648"),
        (lambda d: d["model"].update(n_layer=0), "n_layer is 0, want 1..64"),
        (lambda d: d.update(micro_batches=2**40), "micro_batches is 1099511627776, want 1..65536"),
        (lambda d: d.update(batch_size=2**17), "batch_size is 131072, want 1..65536"),
        (lambda d: d.update(batch_size=2**16, micro_batches=2**10), "tokens, more than the 4194304 allowed"),
        (lambda d: d["optim"].update(warmup_steps=2**40), "warmup_steps is 1099511627776"),
        (lambda d: d["optim"].update(lr=float("inf")), "lr is inf, want a finite number"),
        (lambda d: d["optim"].update(lr=float("nan")), "lr is nan, want a finite number"),
        (lambda d: d["optim"].update(lr=1), "lr is a int, want float"),
        (lambda d: d["optim"].update(eps=0.0), "eps 0.0 in \\(0, 1\\]"),
        (lambda d: d["model"].update(name=""), "model name '' must be"),
        (lambda d: d["model"].update(name="x" * 65), "must be 1..64 printable ASCII"),
        (lambda d: d.update(seed=2**64), "seed 18446744073709551616 is outside"),
        (lambda d: d.update(seed=-1), "seed -1 is outside"),
    ],
)
def test_sizes_are_bounded_before_anything_is_built(mutate, message):
    d = train_config("tiny").to_dict()
    mutate(d)
    with pytest.raises(InputError, match=message):
        TrainConfig.from_dict(d)


def test_the_bounds_admit_the_planned_real_sizes():
    from p2paudit.engine.config import MAX_PARAMS, ModelConfig, count_parameters

    gpt2_xl = ModelConfig("gpt2-xl", 50257, 1024, 48, 25, 1600, 4, True)  # 1.56e9 parameters
    wide = ModelConfig("wide", 2**17, 8192, 1, 64, 8192, 4, True)
    deep = ModelConfig("deep", 2**17, 8192, 64, 16, 1024, 4, False)
    for model in (gpt2_xl, wide, deep):
        assert count_parameters(model) <= MAX_PARAMS
        cfg = dataclasses.replace(train_config("tiny"), model=model, batch_size=4, micro_batches=64)
        assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    big_step = dataclasses.replace(train_config("tiny"), batch_size=2**16, micro_batches=1)  # 2^22 tokens
    assert TrainConfig.from_dict(big_step.to_dict()) == big_step


@pytest.mark.parametrize(
    "model",
    [
        CONFIGS["tiny"],
        CONFIGS["small"],
        ModelConfig("a", 300, 7, 3, 2, 10, 3, False),
        ModelConfig("b", 256, 1, 1, 1, 1, 1, True),
    ],
)
def test_count_parameters_agrees_with_the_state_layout(model):
    from p2paudit.engine.config import count_parameters

    assert count_parameters(model) == count_params(model)
