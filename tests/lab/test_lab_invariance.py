"""The lab mode's state digests are the same bits across thread counts and instruction sets; stock torch's are not.

In process: torch's and numba's thread counts 1 and 2. In subprocesses (slow): ATEN_CPU_CAPABILITY
default (with NUMBA_CPU_NAME=generic and one thread) and avx2 (two threads) beside the host's own. Each
comparison shows stock torch's digests of the same training beside the canonical ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numba
import pytest
import torch

from p2paudit.lab import LabRun
from p2paudit.tensor_digest import digest_state
from tests.generic_isa import GENERIC
from tests.lab import models
from tests.lab.lab_probe import stock_state

REPO = Path(__file__).resolve().parents[2]


def train_both(threads: int) -> tuple[list[str], list[str]]:
    """(canonical state digests, stock state digests) of three steps with `threads` torch and numba threads."""
    old = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(threads)
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        data = models.batches(3, b=4, t=32)
        model, opt = models.make(c=64, heads=4)
        run = LabRun(model, opt, backend="cpu")
        for i, tokens in enumerate(data):
            with run.step(i):
                models.train_step(model, opt, tokens)
        stock_model, stock_opt = models.make(c=64, heads=4)
        stock = []
        for tokens in data:
            models.train_step(stock_model, stock_opt, tokens)
            stock.append(digest_state(stock_state(stock_model, stock_opt)).text())
        return [r.state.text() for r in run.records], stock
    finally:
        torch.set_num_threads(old[0])
        numba.set_num_threads(old[1])


def test_thread_counts_change_no_bit():
    one, one_stock = train_both(1)
    two, two_stock = train_both(2)
    assert len(set(one)) == 3  # three different states, one per step
    assert one == two, f"stock torch beside it: 1 thread {one_stock[-1]}, 2 threads {two_stock[-1]}"


@pytest.mark.slow
def test_instruction_sets_change_no_bit_where_stock_torch_differs():
    envs = [
        {},
        {
            "ATEN_CPU_CAPABILITY": "default",
            **GENERIC,
            "OMP_NUM_THREADS": "1",
            "NUMBA_NUM_THREADS": "1",
        },
        {"ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "2", "NUMBA_NUM_THREADS": "2"},
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, str(REPO / "tests/lab/lab_probe.py"), "cpu", "1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO),
            env={**os.environ, **env, "PYTHONPATH": str(REPO)},
        )
        for env in envs
    ]  # fmt: skip
    results = []
    for env, proc in zip(envs, procs):
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"{env}: {err[-2000:]}"
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert results[1]["settings"]["torch_capability"] == "DEFAULT"
    assert results[1]["settings"]["numba_cpu_name"] == "generic"
    assert results[2]["settings"]["torch_capability"] == "AVX2"
    canonical = [[s["digest"] for s in r["canonical"]] for r in results]
    assert canonical[1] == canonical[0] and canonical[2] == canonical[0], canonical
    assert results[1]["traces"] == results[0]["traces"] == results[2]["traces"]
    # The baseline beside it: stock torch's final states under default and avx2 differ tensor by tensor.
    a, b = (r["stock"][-1]["tensors"] for r in results[1:])
    differing = sorted(name for name in a if a[name] != b[name])
    assert differing, "stock torch gave equal states under default and avx2: the baseline shows nothing here"
