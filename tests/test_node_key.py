"""One node key for every command: found one way, created race-safely and announced, refused when not ours."""

import json
import multiprocessing
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.errors import InputError
from p2paudit.identity import (
    default_config,
    ensure_node_identity,
    generate_identity,
    load_identity,
    load_node_identity,
    node_key_path,
    save_config,
    save_identity,
)


def _invoke(args, home: Path):
    return CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(home)}, catch_exceptions=False)


def test_every_command_uses_the_key_the_config_names(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("P2PAUDIT_HOME", str(home))
    # A config that names a key somewhere else, and a stray node.key beside it.
    named = tmp_path / "keys" / "mine.key"
    save_identity(generate_identity(), named)
    save_identity(generate_identity(), home / "node.key")
    config = default_config()
    save_config(type(config)(**{**config.__dict__, "key": str(named)}), home / "config.json")
    assert node_key_path() == named
    want = load_identity(named).public_key.hex()
    shown = _invoke(["id", "--json"], home)
    assert shown.exit_code == 0 and json.loads(shown.output)["public_key"] == want
    trained = _invoke(["train", str(tmp_path / "run"), "--steps", "1", "--backend", "reference"], home)
    assert trained.exit_code == 0, trained.output
    signer = json.loads((tmp_path / "run" / "manifest.sig.json").read_bytes())["public_key"]
    assert signer == want


def test_a_key_owned_by_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    path = tmp_path / "node.key"
    save_identity(generate_identity(), path)
    os.chown(path, 12345, 12345)
    with pytest.raises(InputError, match="owned by uid 12345"):
        load_identity(path)


def test_a_fifo_as_the_key_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "node.key", 0o600)
    with pytest.raises(InputError, match="not a regular file"):
        load_identity(tmp_path / "node.key")


def test_a_directory_as_the_key_is_named_in_one_line(tmp_path):
    # The red team of issue 14: "Is a directory (4)", naming a file descriptor instead of the key file.
    home = tmp_path / "home"
    (home / "node.key").mkdir(parents=True)
    result = CliRunner().invoke(cli, ["id"], env={"P2PAUDIT_HOME": str(home)})
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [f"Error: key file {home / 'node.key'} is not a regular file"]


def _create(home: str, barrier, out) -> None:
    os.environ["P2PAUDIT_HOME"] = home
    barrier.wait()
    try:
        identity, created = ensure_node_identity()
        out.put((identity.public_key.hex(), created))
    except Exception as exc:  # reported to the parent, which fails the test with it
        out.put(("error", repr(exc)))


def test_two_processes_creating_the_key_at_once_end_with_one_key(tmp_path):
    ctx = multiprocessing.get_context("fork")
    for attempt in range(5):  # several races, each in a fresh home
        home = tmp_path / f"home{attempt}"
        barrier, out = ctx.Barrier(4), ctx.Queue()
        procs = [ctx.Process(target=_create, args=(str(home), barrier, out)) for _ in range(4)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert all(r[0] != "error" for r in results), results
        assert len({key for key, _ in results}) == 1
        assert sum(created for _, created in results) == 1
        assert (home / "config.json").is_file()


def test_attest_says_when_it_creates_the_node_key(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("P2PAUDIT_HOME", str(home))
    key = tmp_path / "publisher.pem"
    save_identity(generate_identity(), key)
    run = tmp_path / "run"
    assert (
        _invoke(["train", str(run), "--steps", "1", "--backend", "reference", "--key", str(key)], home).exit_code == 0
    )
    first = CliRunner().invoke(
        cli,
        ["verify-range", "0", "--run", str(run), "--backend", "reference", "--attest"],
        env={"P2PAUDIT_HOME": str(home)},
    )
    assert first.exit_code == 0, first.output
    assert f"created node key {home / 'node.key'}" in first.output
    assert load_node_identity().public_key.hex() in first.output
    again = _invoke(["verify-range", "0", "--run", str(run), "--backend", "reference", "--attest"], home)
    assert again.exit_code == 0 and "created node key" not in again.output
