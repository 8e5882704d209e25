"""Imports go one way: kernels <- engine <- run <- audit <- attest <- node <- cli.

`identity` and `errors` are leaves; `ledger` and `kernels` import nothing from
p2paudit. Each package is imported (every module in it) in a fresh process,
and any forbidden package that ends up in sys.modules fails the test.
"""

import ast
import json
import os
import subprocess
import sys

import pytest
from pathlib import Path

ORDER = ["p2paudit.engine", "p2paudit.run", "p2paudit.audit", "p2paudit.attest", "p2paudit.node", "p2paudit.cli"]
LEAVES = ["p2paudit.identity", "p2paudit.errors", "p2paudit.durable"]

ALLOWED = {
    "kernels": set(),
    "ledger": set(),
    "p2paudit.errors": set(),
    "p2paudit.durable": set(),
    "p2paudit.identity": {"p2paudit.errors", "p2paudit.durable"},
}
for i, pkg in enumerate(ORDER):
    below = set(ORDER[:i]) | {"kernels", "p2paudit.errors", "p2paudit.durable"}
    if pkg != "p2paudit.engine":
        below |= {"p2paudit.identity"}
    if pkg in ("p2paudit.attest", "p2paudit.node", "p2paudit.cli"):
        below |= {"ledger"}
    ALLOWED[pkg] = below

WATCHED = ["kernels", "ledger"] + LEAVES + ORDER

# Modules that import only where they can run (a GPU, or the Triton interpreter);
# the probe runs them in interpreter mode, and the static scan below covers them anyway.
ENV_GATED = {"kernels.triton_ptx"}

PROBE = r"""
import importlib, json, pkgutil, sys
name, gated = sys.argv[1], set(sys.argv[2:])
mod = importlib.import_module(name)
if hasattr(mod, "__path__"):
    for info in pkgutil.walk_packages(mod.__path__, name + "."):
        if info.name not in gated:
            importlib.import_module(info.name)
print(json.dumps(sorted(sys.modules)))
"""


def _owner(module: str) -> str | None:
    for pkg in sorted(WATCHED, key=len, reverse=True):
        if module == pkg or module.startswith(pkg + "."):
            return pkg
    return None


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_lies_below_it(package):
    # The Triton backend imports only where it can run: on CUDA or in the interpreter.
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run([sys.executable, "-c", PROBE, package, *ENV_GATED], capture_output=True, text=True, timeout=300, env=env)
    if out.returncode != 0 and f"No module named '{package}'" in out.stderr:
        pytest.fail(f"{package} does not exist")
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.splitlines()[-1])
    owners = {_owner(m) for m in loaded} - {None, package}
    forbidden = sorted(owners - ALLOWED[package])
    assert not forbidden, f"{package} imports {forbidden}; allowed: {sorted(ALLOWED[package])}"


def _static_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_source_file_names_a_forbidden_import(package):
    """Every import statement, also inside functions and in env-gated modules."""
    root = Path(__file__).resolve().parent.parent / package.replace(".", "/")
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root.with_suffix(".py")]
    bad = []
    for path in files:
        owners = {_owner(name) for name in _static_imports(path)} - {None, package}
        bad += [f"{path.name} imports {o}" for o in sorted(owners - ALLOWED[package])]
    assert not bad, "; ".join(bad)


def test_the_probe_can_fail():
    # The checker itself must see a forbidden import: kernels importing p2paudit.cli would be one.
    assert "p2paudit.cli" not in ALLOWED["kernels"]
    assert _owner("p2paudit.cli.run_cmds") == "p2paudit.cli"
    assert _owner("p2paudit.identity") == "p2paudit.identity"
    assert _static_imports(Path(__file__)) >= {"ast", "json", "pytest"}
