"""`p2paudit ledger runs` lists the runs a ledger knows; a unique run-id prefix is accepted wherever a run id is."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed, save_identity

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "attest"))
from attest_helpers import key, make_signed  # noqa: E402

NODE = identity_from_seed(hashlib.sha256(b"runs node").digest())
FIRST, SECOND, THIRD = "abcd" + "0" * 60, "abce" + "1" * 60, "f00d" + "2" * 60


def run(home: Path, *args: str):
    return CliRunner().invoke(cli, list(args), env={"P2PAUDIT_HOME": str(home)})


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.fixture
def home(tmp_path) -> Path:
    home = tmp_path / "home"
    save_identity(NODE, home / "node.key")
    for run_hex, steps, label in ((FIRST, 4, "first"), (SECOND, 10, "second"), (THIRD, 2, "")):
        assert run(home, "ledger", "add-run", "--id", run_hex, "--steps", str(steps), "--label", label).exit_code == 0
    items = [
        make_signed(key(1), run=bytes.fromhex(FIRST), step=0),
        make_signed(key(2), run=bytes.fromhex(FIRST), step=1),
        make_signed(key(3), run=bytes.fromhex(FIRST), step=1, verdict="mismatch"),
        make_signed(key(1), run=bytes.fromhex(SECOND), step=9),
    ]
    for n, item in enumerate(items):
        path = tmp_path / f"a{n}.bin"
        path.write_bytes(item.encoded)
        assert run(home, "ledger", "import", str(path)).exit_code == 0
    return home


def test_runs_lists_every_run_with_its_coverage(home, tmp_path):
    result = run(home, "ledger", "runs")
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("3 runs")
    assert lines[1].startswith(f"{FIRST}  'first'  4 steps, 3 keys: checked 2 steps (50.0%), 1 with a mismatch")
    assert lines[2].startswith(f"{SECOND}  'second'  10 steps, 1 keys: checked 1 steps (10.0%), 0 with a mismatch")
    assert lines[3].startswith(f"{THIRD}  '-'  2 steps, 0 keys: checked 0 steps (0.0%)")
    data = json.loads(run(home, "ledger", "runs", "--json").output)
    assert [(r["run_id"], r["label"], r["steps"], r["checked_at_least_once"]) for r in data] == [
        (FIRST, "first", 4, 2),
        (SECOND, "second", 10, 1),
        (THIRD, "", 2, 0),
    ]
    empty = tmp_path / "empty"
    save_identity(NODE, empty / "node.key")
    assert run(empty, "ledger", "checkpoint").exit_code == 0  # a ledger with no run yet
    result = run(empty, "ledger", "runs")
    assert result.exit_code == 0 and result.output.startswith("the ledger knows no runs: p2paudit ledger add-run")
    assert "the ledger knows no runs" in one_line_error(run(empty, "ledger", "coverage", "--run", "ab"), 2)


@pytest.mark.parametrize(
    "command",
    [
        ("ledger", "coverage", "--run"),
        ("ledger", "show", "--step", "1", "--run"),
        ("ledger", "disputes", "--run"),
    ],
)
def test_a_unique_prefix_names_the_run_everywhere(home, command):
    result = run(home, *command, "abcd")
    assert result.exit_code == 0, result.output
    assert run(home, *command, "sha256:ABCD0").exit_code == 0
    assert FIRST[:16] in result.output
    ambiguous = one_line_error(run(home, *command, "abc"), 2)
    assert "run id prefix abc names 2 runs" in ambiguous
    assert f"{FIRST[:16]} (first)" in ambiguous and f"{SECOND[:16]} (second)" in ambiguous
    unknown = one_line_error(run(home, *command, "99"), 2)
    assert "run 99 is not known (no run id starts with it); known:" in unknown and f"{THIRD[:16]} (no label)" in unknown
    assert "is not hex" in one_line_error(run(home, *command, "xyz"), 2)
    assert "is not hex" in one_line_error(run(home, *command, ""), 2)
