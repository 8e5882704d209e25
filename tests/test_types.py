"""The static type checker that scripts/test.sh runs can fail: planted defects, checked with the project's config.

scripts/test.sh runs `.venv/bin/mypy` on the files [tool.mypy] in pyproject.toml
names (strict). Here mypy runs with that same config on two files written in
a temporary directory: a clean one that holds kernels.reference to the
backend contract (it passes, so the set-up is sound), and a planted one with
a backend module missing a function and an unannotated function (it fails,
naming both).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernels.backend_contract import contract_functions

pytestmark = pytest.mark.slow  # about 8 s on 2 shared cores: two mypy runs, numpy's stubs parsed cold

REPO = Path(__file__).resolve().parents[1]
MYPY = Path(sys.executable).with_name("mypy")  # the venv's, pinned in the test extras

CLEAN = """\
from __future__ import annotations

from kernels import reference
import pytest

from kernels.backend_contract import Backend, HostArray

held: Backend[HostArray] = reference
"""


def planted_backend() -> str:
    """A backend module that re-exports the reference's functions but silu, claims the contract, and has an untyped def."""
    names = ", ".join(f"{n} as {n}" for n in contract_functions() if n != "silu")  # "as": re-exported
    return f"""\
from __future__ import annotations

import planted_backend as this
import pytest

from kernels.backend_contract import Backend, HostArray
from kernels.reference import {names}

held: Backend[HostArray] = this


def untyped(x):
    return x
"""


def run_mypy(tmp_path: Path, name: str, text: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    command = [
        str(MYPY),
        "--config-file",
        str(REPO / "pyproject.toml"),
        "--cache-dir",
        str(tmp_path / "cache"),
        str(path),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=str(REPO))


def test_mypy_passes_a_clean_file_and_fails_a_planted_one(tmp_path):
    clean = run_mypy(tmp_path, "clean_backend", CLEAN)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    planted = run_mypy(tmp_path, "planted_backend", planted_backend())
    assert planted.returncode == 1, planted.stdout + planted.stderr
    assert 'is missing following "Backend" protocol member' in planted.stdout
    assert "    silu" in planted.stdout
    assert "Function is missing a type annotation  [no-untyped-def]" in planted.stdout
