"""Numbers past what a run or a ledger can hold are one line and exit 2, never exit 3 or an endless run.

The red team of issue 14: huge indices and step counts reached SQLite or numpy
as OverflowError (exit 3); a run of 2^62 steps was registered (then coverage
--png ran out of memory); `plan` had no bounds (past 90 s at 1.1 GB).
"""

from __future__ import annotations

import hashlib

import pytest
from click.testing import CliRunner

from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed, save_identity

RUN = hashlib.sha256(b"bounds").hexdigest()
NODE = identity_from_seed(hashlib.sha256(b"bounds node").digest())


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    save_identity(NODE, home / "node.key")
    return home


def _one_line_error(home, *args: str) -> str:
    result = CliRunner().invoke(cli, list(args), env={"P2PAUDIT_HOME": str(home)})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    return lines[0]


def test_a_run_has_at_most_2_to_the_32_steps():
    from p2paudit.attest.store import MAX_RUN_STEPS
    from p2paudit.run.manifest_body import MAX_STEPS

    assert MAX_RUN_STEPS == MAX_STEPS == 2**32  # attest's copy of the bound (attest does not import run)


@pytest.mark.parametrize("steps", ["99999999999999999999999", "4611686018427387904", str(2**32 + 1)])
def test_add_run_refuses_more_steps_than_a_run_can_have(home, steps):
    line = _one_line_error(home, "ledger", "add-run", "--id", RUN, "--steps", steps)
    assert f"has {steps} steps, want 1 to {2**32}" in line


def test_add_run_takes_the_largest_run(home):
    result = CliRunner().invoke(
        cli, ["ledger", "add-run", "--id", RUN, "--steps", str(2**32)], env={"P2PAUDIT_HOME": str(home)}
    )
    assert result.exit_code == 0, result.output
    assert f"{2**32} steps" in result.output
    # The red team's MemoryError came from coverage --png of a run that long (2^62 steps then): the picture
    # aggregates into 1,000 columns whatever the length, so the longest run a ledger takes is drawn too.
    png = home.parent / "coverage.png"
    drawn = CliRunner().invoke(cli, ["ledger", "coverage", "--png", str(png)], env={"P2PAUDIT_HOME": str(home)})
    assert drawn.exit_code == 0, drawn.output
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("index", ["99999999999999999999", str(2**63), str(2**63 - 1)])
def test_export_of_an_index_past_any_ledger_is_one_line(home, index):
    made = CliRunner().invoke(cli, ["ledger", "add-run", "--id", RUN, "--steps", "3"], env={"P2PAUDIT_HOME": str(home)})
    assert made.exit_code == 0, made.output
    line = _one_line_error(home, "ledger", "export", "--index", index)
    assert f"entry {index} is not in the ledger of size 0" in line


@pytest.mark.parametrize(
    "args, message",
    [
        (["plan", "--steps", "99999999999999999999", "--volunteers", "10", "--per-volunteer", "2"], "2^32"),
        (["plan", "--steps", "100", "--volunteers", "10", "--per-volunteer", "99999999999999999999"], "2^32"),
        # The red team's: 2^32 steps, a billion volunteers auditing a million steps each.
        (
            ["plan", "--steps", "4294967296", "--volunteers", "1000000000", "--per-volunteer", "1000000"],
            "draw 10,000,000,000 keys",
        ),
        (["plan", "--steps", "100", "--volunteers", "30001", "--per-volunteer", "2"], "draw 300,010 keys"),
        (["plan", "--steps", "100", "--volunteers", "1000", "--per-volunteer", "2", "--trials", "10000"], "trials"),
        (["plan", "--steps", "4294967296", "--volunteers", "100", "--per-volunteer", "10"], "closed form"),
    ],
)
def test_plan_refuses_what_would_not_finish_in_seconds(tmp_path, args, message):
    # Refused from the arguments alone, before any key is drawn or any sum begun (no timing needed to tell).
    assert message in _one_line_error(tmp_path, *args)


@pytest.mark.slow  # about 10 s on an idle core: both estimates at their largest
def test_plan_at_its_bounds_is_answered(tmp_path):
    from p2paudit.cli.node_cmds import CLOSED_FORM_TERMS, KEY_DRAWS

    steps, volunteers = CLOSED_FORM_TERMS // 6, KEY_DRAWS // 10
    args = ["plan", "--steps", str(steps), "--volunteers", str(volunteers), "--per-volunteer", str(steps), "--json"]
    result = CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(tmp_path)})
    assert result.exit_code == 0, result.output
