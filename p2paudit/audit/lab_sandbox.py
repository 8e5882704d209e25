"""The view a lab replay's child process has of this machine: bubblewrap (bwrap), no network, the step's own
files only.

A lab script replayed with this user's rights could read the claimed checkpoint of the state after its
step (it lies beside the one it starts from) or fetch it, return it, and make a forged run match; it
could read the node's key. So the child (audit.lab_child) runs in new namespaces (`--unshare-all`: no
network, not even loopback; its own pids), dies with its parent, and sees a root of its own: the system's
programs and libraries and the Python installation read-only, this package's source read-only, a private
writable copy of the compiled kernels' numba cache (its compiles never reach the cache this process
loads), a fresh /tmp, and of the run only the files the replay reads (the manifest, its signature, the
script and the checkpoints the steps start from). The run's directory and the node's home are masked
where they lie under a bound directory.

P2PAUDIT_LAB_SANDBOX=none runs the child without it (a machine without bubblewrap, such as macOS): the
script then runs with this user's rights and could read the claimed states; docs/lab-mode.md says so.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import kernels
import p2paudit
from p2paudit.errors import InputError
from p2paudit.identity import home_dir

SANDBOX_ENV = "P2PAUDIT_LAB_SANDBOX"
_SYSTEM = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc/ld.so.cache", "/etc/localtime")


class SandboxUnavailable(InputError):
    """No bubblewrap here, and the sandbox was not turned off (exit 2)."""


def sandbox_off() -> bool:
    """Whether P2PAUDIT_LAB_SANDBOX=none asks for the child without the sandbox; InputError for another value."""
    value = os.environ.get(SANDBOX_ENV, "")
    if value not in ("", "bwrap", "none"):
        raise InputError(f"{SANDBOX_ENV}={value!r}: want 'bwrap' (the default) or 'none'")
    return value == "none"


def _bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(
            "a lab replay runs the publisher's script in a bubblewrap sandbox (no network, only the step's own "
            f"files), and bwrap is not installed: apt-get install bubblewrap, or set {SANDBOX_ENV}=none to run "
            "it with your rights (where it could read the claimed states)"
        )
    return found


def _under(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _private_cache(source: Path, scratch: Path, name: str) -> list[str]:
    """A writable copy of numba cache directory `source` in `scratch`, bound over it (nothing if absent)."""
    if not source.is_dir():
        return []
    copy = scratch / name
    shutil.copytree(source, copy, symlinks=False, ignore_dangling_symlinks=True)
    return ["--bind", str(copy), str(source)]


def sandboxed(command: list[str], run_dir: Path, run_files: list[Path], scratch: Path, out: Path) -> list[str]:
    """`command` wrapped in bwrap as the module docstring says: `run_files` (inside `run_dir`) read-only,
    `out` writable, caches copied into `scratch`. SandboxUnavailable without bwrap."""
    args = [_bwrap(), "--unshare-all", "--die-with-parent", "--new-session", "--proc", "/proc", "--dev", "/dev"]
    args += ["--ro-bind", "/sys", "/sys", "--tmpfs", "/tmp"]
    for system in _SYSTEM:
        args += ["--ro-bind-try", system, system]
    code = sorted(
        {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(p2paudit.__file__).resolve().parents[1]}
        | {Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    )
    bound: list[Path] = []
    for path in code:
        if path.is_dir() and not _under(path, bound):
            args += ["--ro-bind", str(path), str(path)]
            bound.append(path)
    for hidden in (home_dir().resolve(), run_dir.resolve()):
        if _under(hidden, bound):
            args += ["--tmpfs", str(hidden)]
    args += _private_cache(Path(kernels.__file__).resolve().parent / "__pycache__", scratch, "kernels-cache")
    if os.environ.get("NUMBA_CACHE_DIR"):
        args += _private_cache(Path(os.environ["NUMBA_CACHE_DIR"]).resolve(), scratch, "numba-cache")
    for file in run_files:
        args += ["--ro-bind", str(file.resolve()), str(file.resolve())]
    args += ["--bind", str(out), str(out), "--chdir", str(out), "--"]
    return args + command
