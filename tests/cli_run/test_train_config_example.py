"""The `train --config FILE.json` example in docs/engine.md is a config that loads and trains, as documented."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.engine.config import count_parameters
from p2paudit.run.manifest_body import read_config_file

ENGINE_DOC = Path(__file__).resolve().parents[2] / "docs" / "engine.md"


def documented_example() -> str:
    found = re.findall(r"```json\n(.*?)```", ENGINE_DOC.read_text(), re.S)
    assert len(found) == 1, "docs/engine.md should hold exactly one ```json block: the --config example"
    return found[0]


def test_the_documented_config_example_loads_and_trains(tmp_path):
    path = tmp_path / "mini.json"
    path.write_text(documented_example())
    cfg = read_config_file(path)
    assert f"one-layer model of {count_parameters(cfg.model):,} parameters" in ENGINE_DOC.read_text()
    assert (cfg.model.n_layer, cfg.batch_size, cfg.micro_batches, cfg.model.seq_len) == (1, 2, 2, 32)
    env = {"P2PAUDIT_HOME": str(tmp_path / "home")}
    args = ["train", str(tmp_path / "run"), "--config", str(path), "--steps", "2", "--backend", "reference"]
    result = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "mini: 21,600 parameters" in result.output and "2 steps in" in result.output
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["config"] == json.loads(documented_example())


def test_an_integer_for_a_float_is_refused_as_documented(tmp_path):
    data = json.loads(documented_example())
    data["optim"]["lr"] = 1
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    args = ["train", str(tmp_path / "run"), "--config", str(path), "--steps", "2", "--backend", "reference"]
    result = CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(tmp_path / "home")})
    assert result.exit_code == 2 and "optim key lr is a int, want float" in result.output, result.output
