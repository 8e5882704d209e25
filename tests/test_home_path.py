"""A home path holding a newline still gives one line of error (the red team of issue 14)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from p2paudit.cli import cli

RUN = "ab" * 32


@pytest.mark.parametrize(
    "args, names",
    [
        (["id"], "node.key"),
        (["ledger", "show", "--step", "0"], "ledger.db"),
        (["ledger", "coverage"], "ledger.db"),
        (["ledger", "add-run", "--id", RUN, "--steps", "3"], "node.key"),
        (["status"], "status.json"),
    ],
)
def test_an_error_naming_a_home_with_a_newline_is_one_line(tmp_path, args, names):
    home = tmp_path / "line one\nline two"
    home.mkdir()
    result = CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(home)})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "line one line two" in lines[0] and names in lines[0]
