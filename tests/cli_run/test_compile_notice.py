"""The first run's one-time compile of the cpu kernels says so on stderr; a run that loads them from numba's cache
says nothing. Real processes, with numba's cache pointed at a directory of our own that lacks one module's kernels,
so the first one must compile them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kernels
from kernels.compile_notice import compiling_now
from p2paudit.cli.progress_display import COMPILING, telling_compiles

NOTICE = "compiling the cpu kernels once (about a minute"


def p2paudit(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "p2paudit", *args], capture_output=True, text=True, env=env, timeout=1200
    )


def _cache_all_but_one_module(cache_dir: Path, missing: str) -> None:
    """Copy the machine code compiled in kernels/__pycache__ (scripts/test.sh compiles it before the tests) to
    where numba looks under NUMBA_CACHE_DIR=cache_dir, but for the kernels of module `missing`: a first run
    then compiles those only (several kernels, one notice), not all of them (about a minute of CPU more).
    Should numba lay its cache out otherwise, the first run compiles everything: slower, the same test."""
    from numba.core.caching import _CacheLocator

    source = Path(kernels.__file__).parent
    target = cache_dir / _CacheLocator.get_suitable_cache_subpath(str(source / "cpu.py"))
    target.mkdir(parents=True)
    for path in (source / "__pycache__").glob("*.nb[ic]"):
        if not path.name.startswith(f"{missing}."):
            shutil.copy2(path, target / path.name)


@pytest.mark.slow  # compiles one module's cpu kernels, in real processes
@pytest.mark.timeout(1500)
def test_the_compile_is_told_once_when_it_happens_and_never_when_cached(tmp_path):
    _cache_all_but_one_module(tmp_path / "numba", "cpu_elementwise")
    env = dict(os.environ, P2PAUDIT_HOME=str(tmp_path / "home"), NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    run_dir = str(tmp_path / "run")
    first = p2paudit(["train", run_dir, "--steps", "1", "--backend", "cpu"], env)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count(NOTICE) == 1, first.stderr
    assert NOTICE not in first.stdout
    again = p2paudit(["verify-range", "0", "--run", run_dir, "--backend", "cpu", "--json"], env)
    assert again.returncode == 0, again.stderr
    assert "compiling" not in again.stderr, again.stderr  # every kernel came from the cache the first run filled
    reference = p2paudit(["verify-range", "0", "--run", run_dir, "--backend", "reference"], env)
    assert reference.returncode == 0 and "compiling" not in reference.stderr, reference.stderr


def test_with_json_the_compile_is_one_event_line(capsys):
    with telling_compiles(True):
        compiling_now()
        compiling_now()  # told once
    compiling_now()  # after the command: nobody is told
    (line,) = capsys.readouterr().err.splitlines()
    assert json.loads(line) == {"event": "compiling", "backend": "cpu", "text": COMPILING}
