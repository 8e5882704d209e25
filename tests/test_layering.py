"""Imports go one way: kernels <- engine <- run <- audit <- attest <- node <- explorer <- cli.

`identity` and `errors` are leaves; `ledger` and `kernels` import nothing from
p2paudit. Each package is imported (every module in it) in a fresh process,
and any forbidden package that ends up in sys.modules fails the test.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.layering_scan import forbidden_imports, lazy_imports, module_cycles, module_name, scan_tree

ORDER = [
    "p2paudit.engine",
    "p2paudit.run",
    "p2paudit.audit",
    "p2paudit.attest",
    "p2paudit.node",
    "p2paudit.explorer",
    "p2paudit.cli",
]
LEAVES = ["p2paudit.identity", "p2paudit.errors", "p2paudit.durable", "p2paudit.regular_files"]

ALLOWED = {
    "kernels": set(),
    "ledger": set(),
    "p2paudit.errors": set(),
    "p2paudit.durable": set(),
    "p2paudit.regular_files": {"p2paudit.errors"},
    "p2paudit.identity": {"p2paudit.errors", "p2paudit.durable", "p2paudit.regular_files"},
}
for i, pkg in enumerate(ORDER):
    below = set(ORDER[:i]) | {"kernels", "p2paudit.errors", "p2paudit.durable", "p2paudit.regular_files"}
    if pkg != "p2paudit.engine":
        below |= {"p2paudit.identity"}
    if pkg in ("p2paudit.attest", "p2paudit.node", "p2paudit.explorer", "p2paudit.cli"):
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


ROOT = Path(__file__).resolve().parent.parent
# Only the CLI imports inside functions (so that --help does not load torch); the library never does.
LAZY_ALLOWED = {"p2paudit.cli"}


def _owner(module: str) -> str | None:
    for pkg in sorted(WATCHED, key=len, reverse=True):
        if module == pkg or module.startswith(pkg + "."):
            return pkg
    return None


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_lies_below_it(package):
    # The Triton backend imports only where it can run: on CUDA or in the interpreter.
    env = dict(os.environ, TRITON_INTERPRET="1")
    out = subprocess.run(
        [sys.executable, "-c", PROBE, package, *ENV_GATED], capture_output=True, text=True, timeout=300, env=env
    )
    if out.returncode != 0 and f"No module named '{package}'" in out.stderr:
        pytest.fail(f"{package} does not exist")
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.splitlines()[-1])
    owners = {_owner(m) for m in loaded} - {None, package}
    forbidden = sorted(owners - ALLOWED[package])
    assert not forbidden, f"{package} imports {forbidden}; allowed: {sorted(ALLOWED[package])}"


# kernels.get_backend loads the backend a run names (cpu compiles numba, triton needs CUDA), so it
# imports by a name from its own table; test_backend_table_stays_inside_kernels holds that table.
DYNAMIC_ALLOWED = {"kernels"}


def _check_tree(root: Path) -> dict[str, list]:
    imports = [
        i
        for i in scan_tree(root, ["kernels", "ledger", "p2paudit"])
        if not (i.target == "?" and i.module in DYNAMIC_ALLOWED)
    ]
    modules = {module_name(root, p) for d in ("kernels", "ledger", "p2paudit") for p in (root / d).rglob("*.py")}
    return {
        "forbidden": forbidden_imports(imports, WATCHED, ALLOWED),
        "lazy": lazy_imports([i for i in imports if i.module not in DYNAMIC_ALLOWED], LAZY_ALLOWED),
        "cycles": module_cycles(imports, modules),
    }


def test_the_source_tree_is_layered_without_lazy_imports_or_cycles():
    """Every import statement (relative, inside functions, importlib), held against the allowed edges."""
    found = _check_tree(ROOT)
    assert found == {"forbidden": [], "lazy": [], "cycles": []}


def test_backend_table_stays_inside_kernels():
    import kernels

    assert all(name.startswith("kernels.") for name in kernels._MODULES.values())


PLANTED = {
    "kernels/__init__.py": "",
    "ledger/__init__.py": "",
    "p2paudit/__init__.py": "",
    "p2paudit/errors.py": "",
    "p2paudit/engine/__init__.py": "from . import step\n",
    # A relative import that climbs to the CLI from the engine.
    "p2paudit/engine/step.py": "from ..cli import main\n",
    # importlib with a literal, and with a computed name.
    "p2paudit/run/__init__.py": "import importlib\nimportlib.import_module('p2paudit.audit.replay')\n",
    "p2paudit/run/loader.py": "import importlib\nNAME = 'x'\nimportlib.import_module(NAME)\n",
    # A lazy import, and a cycle hidden by it.
    "p2paudit/run/publisher.py": "def go():\n    from p2paudit.run.workers import train\n",
    "p2paudit/run/workers.py": "from p2paudit.run.publisher import go\n",
    "p2paudit/audit/__init__.py": "",
    "p2paudit/audit/replay.py": "",
    "p2paudit/cli/__init__.py": "def main():\n    import torch\n",
}


def test_planted_violations_are_each_found(tmp_path):
    for relative, text in PLANTED.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    found = _check_tree(tmp_path)
    assert "p2paudit.engine.step:1 imports p2paudit.cli" in found["forbidden"]
    assert "p2paudit.run:2 imports p2paudit.audit.replay" in found["forbidden"]
    assert "p2paudit.run.loader:3 imports a computed module name" in found["forbidden"]
    assert any(e.startswith("p2paudit.run.publisher:2 p2paudit.run.workers") for e in found["lazy"])
    assert any(c[0] == c[-1] and set(c) == {"p2paudit.run.publisher", "p2paudit.run.workers"} for c in found["cycles"])
    assert not any(entry.startswith("p2paudit.cli") for entry in found["lazy"])  # the CLI may import lazily
