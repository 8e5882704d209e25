"""Running the probe scripts of tests/kernels in fresh interpreters.

Some checks need a process of their own: the Triton interpreter mode and the
instruction-set settings are fixed when a library is first imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def run_probe(script: str, args: list[str], env_extra: dict[str, str], timeout: float) -> dict:
    """Run tests/kernels/<script> in a fresh interpreter and return the JSON it prints last.

    A crash (import error, exception) fails the calling test with the
    subprocess's stderr tail, so a missing backend shows up as a failure.
    """
    env = dict(os.environ)
    env.update(env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run(
        [sys.executable, str(HERE / script), *args],
        capture_output=True, text=True, env=env, timeout=timeout, cwd=str(REPO),
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"{script} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
