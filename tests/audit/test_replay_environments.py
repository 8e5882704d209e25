"""Replays in fresh processes under other instruction-set paths and thread counts reproduce every digest."""

import json
import os
import subprocess
import sys

import pytest

from tests.generic_isa import GENERIC

# Host ISA at 1 thread; the generic ISA at 1 and 2 threads (the run was published
# with the reference backend on the host ISA, so every cpu replay also crosses backends).
ENVIRONMENTS = {
    "1 thread": {"threads": "1"},
    "generic ISA, 1 thread": {"threads": "1", "ATEN_CPU_CAPABILITY": "default", **GENERIC},
    "generic ISA, 2 threads": {"threads": "2", "ATEN_CPU_CAPABILITY": "default", **GENERIC},
}


def _env(spec: dict) -> dict:
    env = dict(os.environ)
    threads = spec["threads"]
    env.update(NUMBA_NUM_THREADS=threads, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    env.update({k: v for k, v in spec.items() if k != "threads"})
    return env


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["cpu", "reference"])
@pytest.mark.parametrize("where", list(ENVIRONMENTS))
def test_every_step_replays_bit_for_bit(traced_run, backend, where):
    cmd = [
        sys.executable,
        "-m",
        "p2paudit",
        "verify-range",
        "0-3",
        "--run",
        str(traced_run),
        "--backend",
        backend,
        "--json",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(ENVIRONMENTS[where]), timeout=900)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-3000:]
    report = json.loads(out.stdout)
    # The initial state rebuilt from the recipe, then steps 0-3.
    assert [(a["subject"], a["verdict"]) for a in report["audits"]] == [("init", "match")] + [("step", "match")] * 4
    assert all(a["observed_digest"] == a["claimed_digest"] for a in report["audits"])
