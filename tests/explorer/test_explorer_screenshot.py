"""scripts/explorer_screenshot.py, without the browser: the ledger it builds for the README's picture, at 1,000
steps, read back through the explorer's API (the answers its pages draw), and its refusals of bad flags.

The picture itself (headless Chromium, 100,000 steps) is made by running the script, not by a test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from p2paudit.explorer.api import Explorer

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "explorer_screenshot.py"
STEPS = 1000


@pytest.fixture(scope="module")
def shot():
    spec = importlib.util.spec_from_file_location("explorer_screenshot_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(shot, tmp_path_factory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("screenshot-ledger") / "ledger.db"
    return path, shot.build_ledger(path, STEPS)


def _get(path: Path, route: str, **params: str) -> dict:
    answer = Explorer(path).answer(route, params)
    assert answer.status == 200, answer.body[:300]
    return json.loads(answer.body)


def test_the_run_reads_as_planned_four_disputes_and_an_amber_sentence(shot, built):
    path, count = built
    per_step = [shot.checks_per_step(step, STEPS) for step in range(STEPS)]
    assert count == sum(per_step) + 3 + 4 + 3  # init, the dishonest key's mismatches, the errors
    run = _get(path, f"/runs/{shot.RUN.hex()}")
    assert run["label"] == shot.LABEL and run["publisher"] == shot.keys()[shot.PUBLISHER].public_key.hex()
    totals = run["totals"]
    assert totals["checked_steps"] == sum(n > 0 for n in per_step)
    assert totals["covered_steps"] == sum(n == 2 for n in per_step)
    assert 0 < totals["checked_steps"] - totals["covered_steps"] < totals["checked_steps"] // 4  # a fading part
    assert totals["unchecked_steps"] >= STEPS // 10  # the newest tenth, at least
    assert (totals["mismatch_steps"], totals["disputed_steps"], totals["errors"]) == (4, 4, 3)
    assert run["init"] == {"attestations": 3, "match": 3, "mismatch": 0, "error": 0}
    assert run["verdict"]["tone"] == "split"
    assert run["verdict"]["sentence"] == (
        f"The publisher claims {STEPS} training steps; {totals['checked_steps']} have been replayed by at least one "
        f"key ({totals['covered_steps']} by 2 or more keys, the network's aim); on 4 steps a key reported a "
        "different result (4 are disputed between keys)."
    )


def test_each_disputed_step_is_two_honest_matches_against_the_dishonest_keys_state(shot, built):
    path, _ = built
    disputes = _get(path, "/disputes", run=shot.RUN.hex())
    steps = [int(at * STEPS) for at in shot.DISPUTED_AT]
    assert (disputes["total"], disputes["disputed_total"]) == (4, 4)
    assert [d["step"] for d in disputes["disputes"]] == steps
    step = _get(path, f"/runs/{shot.RUN.hex()}/steps/{steps[1]}")
    assert step["verdict"]["tone"] == "split"
    assert step["verdict"]["sentence"].startswith(
        f"2 of 3 independent checks reproduced step {steps[1]} exactly; 1 key reported a different state"
    )


def test_the_strip_fades_from_two_keys_to_none(shot, built):
    path, _ = built
    strip = _get(path, f"/runs/{shot.RUN.hex()}/coverage", buckets="10")["buckets"]
    covered = [b["covered_steps"] for b in strip]
    assert covered[:4] == [100] * 4 and covered[-1] == 0
    assert covered[4:] == sorted(covered[4:], reverse=True) and 0 < covered[6] < 100


def _script(*flags: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), **({"PATH": path} if path is not None else {})}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, cwd=str(REPO), env=env, timeout=120
    )


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--steps", "5"], "--steps 5: want at least 100"),
        (["--keep", "."], "exists already; name a new folder"),
        (["--out", "no-such-folder/explorer.png"], "no folder no-such-folder"),
    ],
)
def test_bad_flags_are_refused_in_one_line_before_anything_is_built(tmp_path, flags, said):
    out = tmp_path / "explorer.png"
    proc = _script("--out", str(out), *flags)
    assert proc.returncode == 2, proc.stderr
    assert said in proc.stderr.splitlines()[-1]
    assert not out.exists() and proc.stdout == ""


def test_a_missing_browser_is_named_before_the_ledger_is_built(tmp_path):
    out = tmp_path / "explorer.png"
    proc = _script("--out", str(out), path=str(tmp_path))  # a PATH with no chromium on it
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "explorer_screenshot: no chromium and chromedriver here (apt-get install chromium chromium-driver)"
    ]
    assert proc.stdout == "" and not out.exists()  # no "ledger: ..." line: nothing was built


def test_a_screenshot_that_is_not_a_png_is_refused_and_a_picture_is_replaced_leaving_nothing_else(shot, tmp_path):
    with pytest.raises(SystemExit, match="not a PNG"):
        shot.png_size(b"<html>")
    picture = tmp_path / "explorer.png"
    picture.write_bytes(b"old picture")
    shot.write_whole(picture, b"\x89PNG new")
    assert picture.read_bytes() == b"\x89PNG new" and [p.name for p in tmp_path.iterdir()] == ["explorer.png"]
