"""Verdicts of expensive checks whose inputs rarely change, kept between test runs.

A verdict (a check passed) is stored under a key: the SHA-256 of every input that could change it,
named part by part. A run whose key differs in any part (a kernel source, a library version, the
processor) finds no verdict and checks again; only a pass is stored, so a failing check is rerun every
time. The folder is `.pytest_cache/verdicts` in the checkout (ignored by git, so a fresh clone such as
CI's starts empty and computes each verdict once), or P2PAUDIT_VERDICT_CACHE when set.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CACHE_ENV = "P2PAUDIT_VERDICT_CACHE"
# Environment variables that steer numba's code generation (target CPU, features, optimisation level).
NUMBA_CODEGEN_ENV = ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES", "NUMBA_OPT", "NUMBA_LOOP_VECTORIZE", "NUMBA_SLP_VECTORIZE")


def cache_folder() -> Path:
    """Where verdicts live: $P2PAUDIT_VERDICT_CACHE, else .pytest_cache/verdicts in the checkout."""
    chosen = os.environ.get(CACHE_ENV)
    return Path(chosen) if chosen else REPO / ".pytest_cache" / "verdicts"


def sources_digest(paths: list[Path]) -> str:
    """SHA-256 over the files' names and contents, in name order."""
    digest = hashlib.sha256()
    for path in sorted(paths, key=lambda p: p.name):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _imported_modules(source: Path, package: str) -> set[str]:
    """Names (relative to `package`) of the package's modules that `source` imports by absolute name."""
    found = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == package:
                found.update(alias.name for alias in node.names)
            elif node.module.startswith(package + "."):
                found.add(node.module[len(package) + 1 :].split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(
                a.name[len(package) + 1 :].split(".")[0] for a in node.names if a.name.startswith(package + ".")
            )
    return found


def import_closure(roots: list[Path], package_dir: Path) -> list[Path]:
    """`roots`, the package's __init__.py and every module of the package they import, transitively:
    the sources a compiled kernel's machine code can depend on (a change elsewhere keeps the verdict)."""
    package = package_dir.name
    seen: dict[Path, None] = {}
    pending = [*roots, package_dir / "__init__.py"]
    while pending:
        source = pending.pop()
        if source in seen or not source.is_file():
            continue
        seen[source] = None
        pending.extend(package_dir / f"{name}.py" for name in _imported_modules(source, package))
    return sorted(seen)


def processor_identity(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The processor's model name and instruction-set flags as the kernel reports them (first CPU)."""
    found = {"machine": platform.machine(), "model name": "", "flags": ""}
    if cpuinfo.exists():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            name, _, value = line.partition(":")
            name = name.strip()
            if name in ("model name", "flags") and not found[name]:
                found[name] = value.strip()
    return found


def machine_code_key(
    sources: list[Path], extra: Mapping[str, str], cpuinfo: Path = Path("/proc/cpuinfo")
) -> dict[str, str]:
    """Every input that decides the machine code numba emits for `sources`: their bytes, numba's and
    llvmlite's versions, the interpreter, the processor (as LLVM sees it and as /proc/cpuinfo names
    it) and the environment variables that steer code generation; `extra` adds the checker's own parts."""
    import llvmlite
    import llvmlite.binding as llvm
    import numba

    features = llvm.get_host_cpu_features()
    key = {
        "sources": sources_digest(sources),
        "numba": numba.__version__,
        "llvmlite": llvmlite.__version__,
        "python": sys.version.split()[0],
        "llvm cpu": llvm.get_host_cpu_name(),
        "llvm features": ",".join(sorted(name for name, on in features.items() if on)),
        **{f"cpu {name}": value for name, value in processor_identity(cpuinfo).items()},
        **{name: os.environ.get(name, "") for name in NUMBA_CODEGEN_ENV},
    }
    key.update(extra)
    return key


class VerdictCache:
    """Passed verdicts of one check, one file per (subject, key)."""

    def __init__(self, check: str, folder: Path | None = None) -> None:
        self.folder = (folder or cache_folder()) / check

    def _file(self, subject: str, key: Mapping[str, str]) -> Path:
        digest = hashlib.sha256(json.dumps(dict(key), sort_keys=True).encode()).hexdigest()
        return self.folder / f"{subject}.{digest[:32]}.json"

    def passed(self, subject: str, key: Mapping[str, str]) -> bool:
        """Whether `subject` passed before under exactly this key."""
        return self._file(subject, key).is_file()

    def check(self, subject: str, key: Mapping[str, str], run: Callable[[], None]) -> bool:
        """Run `run` (it raises when the check fails) unless `subject` passed under `key` before; store a
        pass. Returns whether it ran."""
        if self.passed(subject, key):
            return False
        run()
        self.record_pass(subject, key)
        return True

    def record_pass(self, subject: str, key: Mapping[str, str]) -> None:
        """Store the pass (atomically: parallel workers may record the same one) and drop older keys'."""
        target = self._file(subject, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        for stale in target.parent.glob(f"{subject}.*.json"):
            if stale != target:
                stale.unlink(missing_ok=True)
        scratch = target.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps({"subject": subject, "key": dict(key)}, sort_keys=True, indent=1))
        os.replace(scratch, target)
