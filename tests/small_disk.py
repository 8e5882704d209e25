"""A real full disk for a test: a small tmpfs mounted in a private mount namespace, gone with the command.

`unshare -m` as root, `unshare -rm` otherwise; where neither can mount a
tmpfs the test skips with one line, and fails under CI (tests.ci_gate).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.ci_gate import skip_or_fail

# $1 becomes a tmpfs of $2 bytes in this namespace, then the script in $3 runs there with the rest as its arguments.
MOUNTED = 'mount -t tmpfs -o size="$2" tmpfs "$1" && shift 2 && exec bash -c "$@"'


def namespace_prefix(what: str) -> list[str]:
    """The command prefix that enters a private mount namespace where a tmpfs can be mounted;
    skips (fails under CI) naming `what` where there is none."""
    prefixes = [["unshare", "-m"]] if os.geteuid() == 0 else []
    prefixes.append(["unshare", "-rm"])
    reason = "unshare is not installed (util-linux)"
    for prefix in prefixes if shutil.which("unshare") and shutil.which("mount") else []:
        probe = subprocess.run(
            [*prefix, "bash", "-c", 'mount -t tmpfs -o size=65536 tmpfs "$1"', "bash", "/mnt"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if probe.returncode == 0:
            return prefix
        reason = f"{' '.join(prefix)} cannot mount a tmpfs here: {probe.stderr.strip()[:200]}"
    skip_or_fail(what, reason)


def on_small_disk(
    prefix: list[str], mount: Path, size: int, script: str, *args: str, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the bash `script` (its arguments `args`: $1, $2, ...) with a tmpfs of `size` bytes at `mount`."""
    command = [*prefix, "bash", "-c", MOUNTED, "bash", str(mount), str(size), script, "script", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
