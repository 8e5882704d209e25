"""The view a lab replay's child process has of this machine: bubblewrap (bwrap), no network, the step's own
files only.

A lab script replayed with this user's rights could read the claimed checkpoint of the state after its
step (it lies beside the one it starts from) or fetch it, return it, and make a forged run match; it
could read the node's key. So the child (audit.lab_child) runs in new namespaces (`--unshare-all`: no
network, not even loopback; its own pids), with no capabilities, dies with its parent, and sees a root
of its own: the system's programs and libraries and the Python installation read-only, this package's
source read-only, a private copy of the compiled kernels' numba caches (its compiles never reach the
caches this process loads), a fresh /tmp, and of the run only the files the replay reads (the manifest,
its signature, the script and the checkpoint its step starts from). The run's directory and the node's
home are masked where they lie under a bound directory. Nothing it can write is on this machine's disks:
/tmp and the caches' copies are tmpfs of a bounded size (audit.lab_limits), and the state it produces
goes to the parent over a pipe.

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
from p2paudit.audit.lab_limits import LabLimits
from p2paudit.errors import InputError
from p2paudit.identity import home_dir

SANDBOX_ENV = "P2PAUDIT_LAB_SANDBOX"
_ORIGINALS = "/p2paudit-caches"  # where the sandbox sees the caches' originals, read-only
# Inside the sandbox, before the child: each (source, destination) pair of arguments copied (times kept, as
# numba's index compares them), then the command after "--" run in the shell's place.
_COPY_THEN_RUN = 'set -e; while [ "$1" != -- ]; do cp -R -p "$1/." "$2/"; shift 2; done; shift; exec "$@"'
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


def _tree_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file() and not f.is_symlink())


def _private_cache(source: Path, index: int, scratch_bytes: int) -> tuple[list[str], list[str]]:
    """(bwrap arguments, the copy to make inside): numba cache directory `source` bound read-only at a
    place of its own, and a size-limited tmpfs over `source` that the copy fills before the child starts
    (nothing if `source` is absent). numba loads only from a cache it can write to; a compile in the child
    lands in the tmpfs, gone with the sandbox."""
    if not source.is_dir():
        return [], []
    original = f"{_ORIGINALS}/{index}"
    size = _tree_bytes(source) + scratch_bytes
    args = ["--ro-bind", str(source), original, "--size", str(size), "--tmpfs", str(source)]
    return args, [original, str(source)]


def sandboxed(command: list[str], run_dir: Path, run_files: list[Path], limits: LabLimits) -> list[str]:
    """`command` wrapped in bwrap as the module docstring says, with `run_files` (inside `run_dir`) read-only,
    run after the caches' copies are made. SandboxUnavailable without bwrap."""
    args = [_bwrap(), "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    args += ["--proc", "/proc", "--dev", "/dev", "--ro-bind", "/sys", "/sys"]
    args += ["--size", str(limits.scratch_bytes), "--tmpfs", "/tmp"]
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
    caches = [Path(kernels.__file__).resolve().parent / "__pycache__"]
    if os.environ.get("NUMBA_CACHE_DIR"):
        caches.append(Path(os.environ["NUMBA_CACHE_DIR"]).resolve())
    copies: list[str] = []  # source, destination, ...
    for index, cache in enumerate(caches):
        cache_args, cache_copy = _private_cache(cache, index, limits.scratch_bytes)
        args += cache_args
        copies += cache_copy
    for file in run_files:
        args += ["--ro-bind", str(file.resolve()), str(file.resolve())]
    args += ["--chdir", "/tmp", "--", "/bin/sh", "-c", _COPY_THEN_RUN, "sh", *copies, "--"]
    return args + command
