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


def _probe_env(env_extra: dict[str, str]) -> dict[str, str]:
    """This process's environment plus `env_extra`, with the repo and this folder importable."""
    env = dict(os.environ)
    env.update(env_extra)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run_probes(script: str, args: list[str], envs: list[dict[str, str]], timeout: float) -> list[dict]:
    """Run tests/kernels/<script> once per entry of `envs`, all at once; return each run's last JSON line.

    A crash (import error, exception) fails the calling test with that run's
    stderr tail, so a missing backend shows up as a failure. The runs overlap
    because most of their time is numba compiling, one core each.
    """
    procs = [
        subprocess.Popen([sys.executable, str(HERE / script), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=_probe_env(env), cwd=str(REPO))
        for env in envs
    ]  # fmt: skip
    results = []
    try:
        for env, proc in zip(envs, procs):
            out, err = proc.communicate(timeout=timeout)
            if proc.returncode != 0:
                pytest.fail(f"{script} {' '.join(args)} with {env} exited {proc.returncode}:\n{err[-3000:]}")
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:  # only our own children, on failure or timeout
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def run_probe(script: str, args: list[str], env_extra: dict[str, str], timeout: float) -> dict:
    """Run tests/kernels/<script> once with `env_extra` added; return the JSON it prints last."""
    return run_probes(script, args, [env_extra], timeout)[0]
