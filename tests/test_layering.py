"""Imports go one way, along the edges shared/DESIGN.md draws (tests/layering_rules.py lists each, and why).

The static scan reads every import of every module of every shipped package
(relative, lazy, through importlib, exec or getattr); a probe process per unit
imports each of its modules and shows what really gets loaded. Planted
violations show that every rule can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.layering_rules import ALLOWED, DEPARTURES, ROOTS, THIRD_PARTY, check_tree, loaded_outside, unit_of
from tests.layering_scan import tree_modules

ROOT = Path(__file__).resolve().parent.parent
CLEAN = {
    "unknown packages": [],
    "no unit": [],
    "forbidden": [],
    "unused edges": [],
    "stale departures": [],
    "lazy": [],
    "indirect": [],
    "third party": [],
    "cycles": [],
}

# Modules the probe does not import (the static scan reads them all the same).
NOT_PROBED = {
    "kernels.triton_ptx": "imports only where Triton can compile for a GPU",
    "p2paudit.__main__": "importing it runs the CLI",
}

PROBE = r"""
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(sys.modules)))
"""


def test_the_source_tree_keeps_every_rule():
    """Every import statement (relative, inside functions, importlib), held against the table's edges."""
    assert check_tree(ROOT) == CLEAN


def test_the_table_covers_exactly_what_is_shipped():
    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert sorted(p.rstrip("*") for p in shipped["include"]) == sorted(ROOTS)
    assert all(a in ALLOWED and b in ALLOWED for a, b in DEPARTURES)
    assert all(b in ALLOWED for edges in ALLOWED.values() for b in edges)


def test_backend_table_stays_inside_kernels():
    import kernels

    assert all(name.startswith("kernels.") for name in kernels._MODULES.values())
    assert all(name.startswith("kernels.cpu_") for name in kernels._DIGEST_MODULES.values())
    assert all(name.startswith("kernels.cpu_") for name in kernels._HOST_MODULES.values())


def _probe(root: Path, unit: str) -> list[str]:
    """Import every module of `unit` under `root` in a fresh process; the units it loaded beyond the table."""
    names = sorted(m for m in tree_modules(root, list(ROOTS)) if unit_of(m) == unit and m not in NOT_PROBED)
    # The Triton backend imports only where it can run: on CUDA or in the interpreter.
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *names], capture_output=True, text=True, timeout=300, env=env, cwd=root
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return loaded_outside(unit, json.loads(out.stdout.splitlines()[-1]))


@pytest.mark.slow  # one process per unit, most of them loading torch
@pytest.mark.parametrize("unit", sorted(ALLOWED))
def test_each_unit_loads_only_what_the_table_lets_it_reach(unit):
    assert _probe(ROOT, unit) == []


def _plant(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


# One planted tree breaks every rule; each entry says which.
PLANTED = {
    "exit_codes/__init__.py": "",
    "kernels/__init__.py": "",
    # numba outside the CPU kernels, triton outside the Triton kernels.
    "kernels/reference.py": "import numba\n",
    "kernels/cpu.py": "import triton\n",
    "ledger/__init__.py": "",
    "p2paudit/__init__.py": "",
    "p2paudit/errors.py": "",
    # A top-level import in __main__ that skips the CLI.
    "p2paudit/__main__.py": "import p2paudit.node.daemon\n",
    "p2paudit/engine/__init__.py": "from . import step\n",
    # A relative import that climbs to the CLI from the engine; torch where the design has none.
    "p2paudit/engine/step.py": "from ..cli import main\nimport torch\n",
    # importlib with a literal, and with a computed name.
    "p2paudit/run/__init__.py": "import importlib\nimportlib.import_module('p2paudit.audit.replay')\n",
    "p2paudit/run/loader.py": "import importlib\nNAME = 'x'\nimportlib.import_module(NAME)\n",
    # A lazy import, and a cycle hidden by it.
    "p2paudit/run/publisher.py": "def go():\n    from p2paudit.run.workers import train\n",
    "p2paudit/run/workers.py": "from p2paudit.run.publisher import go\n",
    "p2paudit/audit/__init__.py": "",
    "p2paudit/audit/replay.py": "",
    # A skip edge the design does not draw: attest -> engine.
    "p2paudit/attest/__init__.py": "from p2paudit.engine import step\n",
    # getattr(importlib, 'import_module') inside a function, and exec of an import.
    "p2paudit/attest/sneaky.py": (
        "def load():\n    import importlib\n    return getattr(importlib, 'import_module')('p2paudit.cli')\n"
        "exec('import p2paudit.cli')\n"
    ),
    # libp2p outside the adapter (node/net); a library the table does not know.
    "p2paudit/node/__init__.py": "",
    "p2paudit/node/daemon.py": "import libp2p\nimport requests\n",
    "p2paudit/node/net/__init__.py": "from p2paudit.node.net._host import Host\n",
    "p2paudit/node/net/_host.py": "import libp2p\n",
    # The wire is pure: trio there, and an import of the daemon from it.
    "p2paudit/node/wire/__init__.py": "import trio\nfrom p2paudit.node.daemon import Daemon\n",
    # A protocol reaching behind net's face, and importing libp2p itself; the face itself is allowed.
    "p2paudit/node/protocols/__init__.py": "",
    "p2paudit/node/protocols/sync.py": (
        "from p2paudit.node.net._host import Host\nimport libp2p.abc\nfrom p2paudit.node.net import Node\n"
    ),
    # The assignment imports no network.
    "p2paudit/node/assign/__init__.py": "from p2paudit.node import net\n",
    "p2paudit/cli/__init__.py": "def main():\n    import torch\n",
    # A module and a package the table has no place for.
    "p2paudit/helpers.py": "",
    "extra/__init__.py": "",
}


def test_planted_violations_are_each_found(tmp_path):
    found = check_tree(_plant(tmp_path, PLANTED))
    assert found["unknown packages"] == ["extra"]
    assert found["no unit"] == ["p2paudit.helpers"]
    forbidden = "\n".join(found["forbidden"])
    assert "p2paudit.__main__:1 imports p2paudit.node.daemon (p2paudit.__main__ -> p2paudit.node" in forbidden
    assert "p2paudit.engine.step:1 imports p2paudit.cli" in forbidden
    assert "p2paudit.run:2 imports p2paudit.audit.replay" in forbidden
    assert "p2paudit.attest:1 imports p2paudit.engine (p2paudit.attest -> p2paudit.engine is no edge)" in forbidden
    assert "p2paudit.cli -> p2paudit.node" in found["unused edges"]  # the table names only edges in use
    assert found["stale departures"] == ["p2paudit.audit -> p2paudit.identity"]
    indirect = "\n".join(found["indirect"])
    assert "p2paudit.run.loader:3 computed module name" in indirect
    assert "p2paudit.attest.sneaky:3 the name 'import_module' as a string" in indirect
    assert "p2paudit.attest.sneaky:2 import machinery" in indirect
    assert "p2paudit.attest.sneaky:4 exec() of source text" in indirect
    assert any(e.startswith("p2paudit.run.publisher:2 p2paudit.run.workers") for e in found["lazy"])
    assert not any(entry.startswith("p2paudit.cli") for entry in found["lazy"])  # the CLI may import lazily
    assert any(c[0] == c[-1] and set(c) == {"p2paudit.run.publisher", "p2paudit.run.workers"} for c in found["cycles"])
    third = "\n".join(found["third party"])
    for where, library in [
        ("kernels.reference:1", "numba"),
        ("kernels.cpu:1", "triton"),
        ("p2paudit.engine.step:2", "torch"),
        ("p2paudit.node.daemon:1", "libp2p"),
        ("p2paudit.cli:2", "torch"),
    ]:
        assert f"{where} imports {library}: {library} is confined to {', '.join(THIRD_PARTY[library][0])}" in third
    assert "p2paudit.node.daemon:2 imports requests: requests is in no row of THIRD_PARTY" in third
    assert "libp2p_host" not in third
    # node/wire and node/net: each planted import is found, and what the table allows is not.
    assert "p2paudit.node.wire:1 imports trio: trio is confined to " in third
    assert (
        "p2paudit.node.wire:2 imports p2paudit.node.daemon.Daemon (p2paudit.node.wire -> p2paudit.node.daemon"
        in forbidden
    )
    assert (
        "p2paudit.node.protocols.sync:1 imports p2paudit.node.net._host.Host "
        "(_host is private to p2paudit.node.net: import p2paudit.node.net (its face))" in forbidden
    )
    assert "p2paudit.node.protocols.sync:2 imports libp2p.abc: libp2p is confined to p2paudit.node.net.*" in third
    assert "p2paudit.node.protocols.sync:3" not in forbidden  # net's face
    assert (
        "p2paudit.node.assign:1 imports p2paudit.node.net (p2paudit.node.assign -> p2paudit.node.net is no edge)"
        in (forbidden)
    )
    assert "p2paudit.node.net:1" not in forbidden and "p2paudit.node.net._host" not in third  # inside net


def test_a_package_init_above_a_reachable_unit_is_loaded_freely_and_nothing_else_of_its_unit():
    """Loading node.daemon.status loads p2paudit.node's __init__ (Python does): no edge; its localnet is one."""
    assert loaded_outside("p2paudit.explorer", ["p2paudit.node", "p2paudit.node.daemon.status"]) == []
    assert loaded_outside("p2paudit.explorer", ["p2paudit.node", "p2paudit.node.localnet"]) == ["p2paudit.node"]
    assert loaded_outside("p2paudit.node.wire", ["p2paudit.node", "p2paudit.node.daemon.run"]) == [
        "p2paudit.node.daemon"
    ]


def test_the_probe_sees_an_import_the_scan_cannot_follow(tmp_path):
    """exec hides an import from a reading of the source; the process that runs it still loads the module."""
    root = _plant(
        tmp_path,
        {"exit_codes/__init__.py": "", "ledger/__init__.py": "", "kernels/__init__.py": "exec('import ledger')\n"},
    )
    assert _probe(root, "kernels") == ["ledger"]
    assert _probe(root, "ledger") == []
