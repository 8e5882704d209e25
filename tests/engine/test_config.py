"""Configs: named presets, exact JSON round trips, strict parsing."""

import json

import pytest

from p2paudit.engine.config import CONFIGS, TrainConfig, train_config
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
