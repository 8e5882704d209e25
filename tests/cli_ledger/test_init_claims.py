"""The initial state is a claim of its own, visible in `ledger show`, `coverage`, `disputes` and the picture.

The red team of issue 14: a signed `init` mismatch reached the ledger but
`ledger show --step 0` listed none and `ledger coverage` said "steps with a
mismatch: 0"; only `ledger export --index` showed it.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from p2paudit.attest.queries import initial_state_coverage
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "attest"))
from attest_helpers import RUN, key, make_signed  # noqa: E402

NODE = identity_from_seed(hashlib.sha256(b"init claims node").digest())
A, B = key(1), key(2)
INIT_LINE = "initial state (state 0 as the recipe builds it): checked by 2 keys (1 match, 1 mismatch), 0 error"


@pytest.fixture
def ledger_path(tmp_path) -> Path:
    """Run of 3 steps: step 0 matched by A; the initial state matched by A and found wrong by B."""
    path = tmp_path / "ledger.db"
    with AttestationStore.open(path, origin_for(NODE.public_key)) as store:
        store.register_run(RUN, 3, "init")
        for item in (
            make_signed(A, step=0),
            make_signed(A, subject="init"),
            make_signed(B, subject="init", verdict="mismatch"),
        ):
            store.append(item.encoded)
    return path


def _ledger(path: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["ledger", *args, "--ledger", str(path)])
    assert result.exit_code == 0, result.output
    return result.output


def test_show_step_zero_points_at_the_initial_state_and_show_init_lists_it(ledger_path):
    step0 = _ledger(ledger_path, "show", "--step", "0")
    assert "step 0: 1 attestations" in step0
    assert f"{INIT_LINE}: ledger show --step init" in step0
    init = _ledger(ledger_path, "show", "--step", "init")
    assert f"run {RUN.hex()} the initial state: 2 attestations" in init
    assert "[2] mismatch" in init
    listed = json.loads(_ledger(ledger_path, "show", "--step", "init", "--json"))
    assert [(item["index"], item["subject"], item["verdict"]) for item in listed] == [
        (1, "init", "match"),
        (2, "init", "mismatch"),
    ]


@pytest.mark.parametrize("step", ["-1", "x", "0x1"])
def test_show_refuses_what_is_neither_a_step_nor_init(ledger_path, step):
    result = CliRunner().invoke(cli, ["ledger", "show", "--step", step, "--ledger", str(ledger_path)])
    assert result.exit_code == 2 and "is not a step number (0 or more) or 'init'" in result.output


def test_coverage_counts_the_initial_state_apart_from_the_steps(ledger_path):
    text = _ledger(ledger_path, "coverage")
    assert "steps with a mismatch: 0" in text and f"  {INIT_LINE}" in text
    view = json.loads(_ledger(ledger_path, "coverage", "--json"))
    assert view["all_keys"]["initial_state"] == {"checked": 2, "match": 1, "mismatch": 1, "error": 0}
    trusted = ledger_path.parent / "trusted.txt"
    trusted.write_text(A.public_key.hex() + "\n")
    only_a = json.loads(_ledger(ledger_path, "coverage", "--json", "--trusted", str(trusted)))
    assert only_a["trusted_keys"]["initial_state"] == {"checked": 1, "match": 1, "mismatch": 0, "error": 0}


def test_disputes_name_the_initial_state(ledger_path):
    text = _ledger(ledger_path, "disputes")
    assert "1 disputed claims" in text and f"run {RUN.hex()[:16]}... the initial state: 2 outcomes" in text
    assert "step -1" not in text


def test_the_coverage_picture_shows_the_initial_state(ledger_path, tmp_path):
    from p2paudit.cli.coverage_png import COLORS, draw
    from p2paudit.explorer.coverage import bucket_coverage

    png = tmp_path / "coverage.png"
    _ledger(ledger_path, "coverage", "--png", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with AttestationStore.open_readonly(ledger_path) as store:
        strip, initial = bucket_coverage(store, RUN, buckets=3), initial_state_coverage(store, RUN)
    figure = draw(tmp_path / "again.png", strip, None, initial)
    axes = figure.axes[0]
    assert "initial state: checked by 2 keys (1 match, 1 mismatch, 0 error)" in axes.get_title()
    left_of_step_0 = [bar for bar in axes.collections if bar.get_paths()[0].get_extents().x1 <= 0]
    assert [tuple(bar.get_facecolor()[0]) for bar in left_of_step_0] == [_rgba(COLORS["disputed"])]


def _rgba(color: str) -> tuple[float, ...]:
    from matplotlib.colors import to_rgba

    return to_rgba(color)
