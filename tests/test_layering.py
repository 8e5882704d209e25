"""Imports go one way: kernels <- engine <- run <- audit <- attest <- node <- cli.

`identity` and `errors` are leaves; `ledger` and `kernels` import nothing from
p2paudit. Each package is imported (every module in it) in a fresh process,
and any forbidden package that ends up in sys.modules fails the test.
"""

import json
import subprocess
import sys

import pytest

ORDER = ["p2paudit.engine", "p2paudit.run", "p2paudit.audit", "p2paudit.attest", "p2paudit.node", "p2paudit.cli"]
LEAVES = ["p2paudit.identity", "p2paudit.errors"]

ALLOWED = {
    "kernels": set(),
    "ledger": set(),
    "p2paudit.errors": set(),
    "p2paudit.identity": {"p2paudit.errors"},
}
for i, pkg in enumerate(ORDER):
    below = set(ORDER[:i]) | {"kernels", "p2paudit.errors"}
    if pkg != "p2paudit.engine":
        below |= {"p2paudit.identity"}
    if pkg in ("p2paudit.attest", "p2paudit.node", "p2paudit.cli"):
        below |= {"ledger"}
    ALLOWED[pkg] = below

WATCHED = ["kernels", "ledger"] + LEAVES + ORDER

PROBE = r"""
import importlib, json, pkgutil, sys
name = sys.argv[1]
mod = importlib.import_module(name)
if hasattr(mod, "__path__"):
    for info in pkgutil.walk_packages(mod.__path__, name + "."):
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
    out = subprocess.run([sys.executable, "-c", PROBE, package], capture_output=True, text=True, timeout=300)
    if out.returncode != 0 and f"No module named '{package}'" in out.stderr:
        pytest.fail(f"{package} does not exist")
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.splitlines()[-1])
    owners = {_owner(m) for m in loaded} - {None, package}
    forbidden = sorted(owners - ALLOWED[package])
    assert not forbidden, f"{package} imports {forbidden}; allowed: {sorted(ALLOWED[package])}"


def test_the_probe_can_fail():
    # The checker itself must see a forbidden import: kernels importing p2paudit.cli would be one.
    assert "p2paudit.cli" not in ALLOWED["kernels"]
    assert _owner("p2paudit.cli.run_cmds") == "p2paudit.cli"
    assert _owner("p2paudit.identity") == "p2paudit.identity"
