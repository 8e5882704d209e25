"""`p2paudit init` and `p2paudit id` through click's runner."""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.identity import load_config, load_identity, peer_id_of


def _run(home, *args):
    return CliRunner().invoke(cli, list(args), env={"P2PAUDIT_HOME": str(home)})


def test_init_then_id(tmp_path):
    home = tmp_path / "node"
    result = _run(home, "init", "--name", "alice", "--redundancy", "2")
    assert result.exit_code == 0, result.output
    key_path = home / "node.key"
    assert key_path.stat().st_mode & 0o777 == 0o600
    config = load_config(home / "config.json")
    assert (config.node_name, config.redundancy, config.listen) == ("alice", 2, "/ip4/127.0.0.1/tcp/0")
    assert config.ledger == str(home / "ledger.db")
    identity = load_identity(key_path)
    result = _run(home, "id", "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert shown == {"public_key": identity.public_key.hex(), "peer_id": peer_id_of(identity.public_key)}
    plain = _run(home, "id")
    assert identity.public_key.hex() in plain.output and shown["peer_id"] in plain.output


def test_init_refuses_to_overwrite(tmp_path):
    home = tmp_path / "node"
    assert _run(home, "init").exit_code == 0
    before = (home / "node.key").read_bytes()
    result = _run(home, "init")
    assert result.exit_code == 2
    assert "already exists" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert (home / "node.key").read_bytes() == before


def test_init_refuses_when_only_config_exists(tmp_path):
    home = tmp_path / "node"
    home.mkdir()
    (home / "config.json").write_text("{}")
    result = _run(home, "init")
    assert result.exit_code == 2 and "config file" in result.output
    assert not (home / "node.key").exists()


def test_id_refuses_a_key_readable_by_others(tmp_path):
    home = tmp_path / "node"
    assert _run(home, "init").exit_code == 0
    os.chmod(home / "node.key", 0o644)
    result = _run(home, "id")
    assert result.exit_code == 2
    assert "mode 0644" in result.output and "chmod 600" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_id_without_init(tmp_path):
    result = _run(tmp_path / "empty", "id")
    assert result.exit_code == 2
    assert "does not exist" in result.output and "p2paudit init" in result.output


def test_init_bad_redundancy(tmp_path):
    result = _run(tmp_path / "n", "init", "--redundancy", "0")
    assert result.exit_code == 2
