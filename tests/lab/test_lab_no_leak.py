"""Nothing leaks past the mode: with every stock CPU kernel of the table's ops raising, a step still completes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from p2paudit.lab import LabRun
from p2paudit.lab.table import TABLE
from tests.lab import models

REPO = Path(__file__).resolve().parents[2]


def test_every_stock_kernel_of_the_table_raising_changes_nothing():
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests/lab/leak_probe.py")],
        capture_output=True, text=True, timeout=900, cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["overridden"] == len(TABLE)
    assert report["stock_failed"].startswith("the stock kernel of aten."), "the overrides did not take effect"
    data = models.batches(2, b=2, t=16)
    model, opt = models.make(c=32, heads=4)
    run = LabRun(model, opt, backend="cpu")
    for i, tokens in enumerate(data):
        with run.step(i):
            models.train_step(model, opt, tokens)
    assert report["digests"] == [r.state.text() for r in run.records]
