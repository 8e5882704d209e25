"""The examples published with `p2paudit train-script` and replayed with `p2paudit verify-range` under other
thread counts and instruction sets, each a process of its own as a user runs them: every check matches (exit 0).

tests/lab/test_lab_invariance.py trains the examples under these settings through the library; this is
the path a lab and its auditors take: a run directory written by one process on the host's own instruction
set (AVX-512 here) and threads, checked by others under ATEN_CPU_CAPABILITY=default with
NUMBA_CPU_NAME=generic and one thread, and under avx2 with two threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.generic_isa import GENERIC
from tests.lab.lab_runs import EXAMPLES

REPO = EXAMPLES.parent
SETTINGS = {
    "default-generic-1": {
        "ATEN_CPU_CAPABILITY": "default",
        **GENERIC,
        "OMP_NUM_THREADS": "1",
        "NUMBA_NUM_THREADS": "1",
    },
    "avx2-2": {"ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "2", "NUMBA_NUM_THREADS": "2"},
}
STEPS = 2


def _p2paudit(home: Path, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`python -m p2paudit ARGS` with this tree's code (PYTHONPATH) and its own home (the node key)."""
    full = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO), "P2PAUDIT_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "p2paudit", *args], env=full, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _finish(procs: dict[str, subprocess.Popen[str]]) -> dict[str, tuple[int, str]]:
    return {name: (proc.wait(timeout=600), proc.communicate()[0]) for name, proc in procs.items()}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_published_examples_replay_under_other_threads_and_instruction_sets(tmp_path):
    examples = ("lab_gpt2.py", "lab_llama.py")
    runs = {name: tmp_path / name.removesuffix(".py") for name in examples}
    trained = _finish(
        {
            name: _p2paudit(
                tmp_path / f"lab-{name}", ["train-script", str(EXAMPLES / name), str(run), "--steps", str(STEPS)]
            )
            for name, run in runs.items()
        }
    )
    for name, (code, output) in trained.items():
        assert code == 0, f"train-script {name}: {output[-2000:]}"
    replays = _finish(
        {
            f"{name} under {setting}": _p2paudit(
                tmp_path / f"auditor-{name}-{setting}", ["verify-range", f"0-{STEPS - 1}", "--run", str(run)], env
            )
            for name, run in runs.items()
            for setting, env in SETTINGS.items()
        }
    )
    for what, (code, output) in replays.items():
        assert code == 0, f"verify-range of {what}: {output[-2000:]}"
        checks = [line.split() for line in output.splitlines() if line.startswith(("init ", "step "))]
        assert [c[:2] for c in checks] == [["init", "match"], *(["step", str(n)] for n in range(STEPS))], what
        assert all(c[2] == "match" for c in checks[1:]), what
        assert f"{STEPS + 1} check(s) of run sha256:" in output and f"{STEPS + 1} match, 0 mismatch" in output, what
