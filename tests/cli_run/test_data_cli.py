"""`p2paudit data import` and `train --config FILE.json --data DIR`, end to end through the CLI."""

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.engine.config import CONFIGS, TINY, train_config


def _invoke(args, home):
    return CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(home)}, catch_exceptions=False)


def _config_file(tmp_path, model, steps=2, **train):
    cfg = dataclasses.replace(train_config("tiny", steps=steps), model=model, **train)
    path = tmp_path / f"{model.name}.json"
    path.write_text(json.dumps(cfg.to_dict()))
    return path


def test_import_train_and_verify_on_uint16_tokens(tmp_path):
    np.random.default_rng(3).integers(0, 300, 5000).astype("<u2").tofile(tmp_path / "train.bin")
    out = _invoke(["data", "import", str(tmp_path / "train.bin"), "--vocab-size", "300", str(tmp_path / "d")], tmp_path)
    assert out.exit_code == 0, out.output
    assert out.output.startswith("data sha256:") and "5000 tokens (uint16, vocab_size 300)" in out.output
    cfg = _config_file(tmp_path, dataclasses.replace(TINY, name="tiny-v300", vocab_size=300))
    run = tmp_path / "run"
    args = ["train", str(run), "--config", str(cfg), "--data", str(tmp_path / "d"), "--steps", "2"]
    trained = _invoke([*args, "--backend", "reference"], tmp_path)
    assert trained.exit_code == 0, trained.output
    assert "121,920 parameters; memory per process: train step" in trained.output
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["data"]["tokenizer"] == "token-ids" and manifest["data"]["vocab_size"] == 300
    check = _invoke(["verify-range", "0-1", "--run", str(run), "--backend", "reference"], tmp_path)
    assert check.exit_code == 0, check.output
    assert "3 match, 0 mismatch" in check.output
    # The same data with a model whose vocabulary does not cover the ids: exit 2, one line, nothing trained.
    small = _config_file(tmp_path, dataclasses.replace(TINY, name="tiny-v256"))
    refused = _invoke(["train", str(tmp_path / "r2"), "--config", str(small), "--data", str(tmp_path / "d")], tmp_path)
    assert refused.exit_code == 2 and "token ids lie below 300" in refused.output
    assert not (tmp_path / "r2").exists()


def test_train_refuses_what_does_not_fit_unless_overridden(tmp_path, monkeypatch):
    from p2paudit.engine import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 4 * 2**20)
    refused = _invoke(["train", str(tmp_path / "run"), "--steps", "1", "--backend", "reference"], tmp_path)
    assert refused.exit_code == 2
    assert "needs about 8.56 MiB of memory but 4.00 MiB is available" in refused.output
    assert not (tmp_path / "run").exists()
    forced = ["train", str(tmp_path / "run"), "--steps", "1", "--backend", "reference", "--ignore-memory-check"]
    assert _invoke(forced, tmp_path).exit_code == 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["--config", "huge"], "is not a preset"),
        (["--config", "nowhere.json"], "is missing"),
        (["--config", "CFG", "--seed", "3"], "come from the --config file"),
        (["--data", "nodata"], "does not exist"),
    ],
)
def test_train_config_and_data_usage_errors(tmp_path, args, message):
    cfg = _config_file(tmp_path, dataclasses.replace(TINY, name="mine"))
    args = [str(cfg) if a == "CFG" else str(tmp_path / a) if a in ("nowhere.json", "nodata") else a for a in args]
    result = _invoke(["train", str(tmp_path / "run"), *args], tmp_path)
    assert result.exit_code == 2 and message in result.output, result.output


@pytest.mark.slow
def test_125m_shape_trains_and_replays_at_a_small_token_count(tmp_path):
    """The 125m shape at seq_len 64, batch 1, one micro-batch: 2 steps trained, both replayed."""
    model = dataclasses.replace(CONFIGS["125m"], name="125m-seq64", seq_len=64)
    cfg = _config_file(tmp_path, model, batch_size=1, micro_batches=1)
    run = tmp_path / "run"
    trained = _invoke(["train", str(run), "--config", str(cfg), "--steps", "2", "--ckpt-every", "2"], tmp_path)
    assert trained.exit_code == 0, trained.output
    check = _invoke(["verify-range", "0-1", "--run", str(run)], tmp_path)
    assert check.exit_code == 0 and "3 match, 0 mismatch" in check.output, check.output
