"""Every backend module has every function of the contract, with the contract's parameter names.

mypy checks the types (kernels/backend_contract.py, kernels/triton_backend.py);
this checks at run time what a module actually holds, so a backend missing a
function fails here even where nobody runs the type checker. The triton
backend is imported in a subprocess with TRITON_INTERPRET=1 (this file, run
as a script), so the variable never leaks into the test session.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from kernels.backend_contract import Backend, contract_functions


def contract_problems(module: types.ModuleType) -> list[str]:
    """What `module` lacks of the contract: missing functions, and parameter names that differ."""
    problems = []
    for name in contract_functions():
        function = getattr(module, name, None)
        if not callable(function):
            problems.append(f"{module.__name__} has no function {name}")
            continue
        want = list(inspect.signature(getattr(Backend, name)).parameters)[1:]  # without self
        got = list(inspect.signature(function).parameters)
        if got != want:
            problems.append(f"{module.__name__}.{name} takes {got}, the contract says {want}")
    return problems


def test_the_contract_lists_every_function_of_the_kernels_docstring():
    import kernels

    table = [line for line in kernels.__doc__.splitlines() if line.startswith("    ")]  # the two indented lists
    called = {name for line in table for name in re.findall(r"\b([a-z_]+)\(", line)}
    assert called - {"float32"} == set(contract_functions())  # float32(d): a conversion in a description


@pytest.mark.parametrize("name", ["reference", "cpu"])
def test_numpy_backend_keeps_the_contract(name):
    import kernels

    backend = kernels.get_backend(name)
    assert contract_problems(backend) == []
    assert isinstance(backend, Backend)


@pytest.mark.slow
@pytest.mark.triton
def test_triton_backend_keeps_the_contract():  # about 6 s: a subprocess imports torch and triton
    env = dict(os.environ, TRITON_INTERPRET="1")
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, __file__], capture_output=True, text=True, timeout=300, env=env, cwd=str(repo)
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == []


def test_a_missing_function_or_a_renamed_parameter_is_named():
    from kernels import reference

    planted = types.ModuleType("planted")
    planted.__dict__.update({n: getattr(reference, n) for n in contract_functions() if n != "silu"})
    planted.exp = lambda y: reference.exp(y)
    assert contract_problems(planted) == [
        "planted.exp takes ['y'], the contract says ['x']",
        "planted has no function silu",
    ]
    assert not isinstance(planted, Backend)


if __name__ == "__main__":
    from kernels import triton_backend

    print(json.dumps(contract_problems(triton_backend)))
