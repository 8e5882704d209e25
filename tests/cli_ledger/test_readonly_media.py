"""A ledger on a read-only file system can be read: show, verify, coverage (not SQLITE_CANTOPEN, exit 2).

The file system is made read-only by a bind mount remounted read-only in a
private mount namespace (`unshare -m` as root, `unshare -rm` otherwise), so
nothing outlives the command. Where mount namespaces cannot be made the tests
skip with one line, and fail when the CI environment variable is set.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.identity import identity_from_seed
from tests.ci_gate import skip_or_fail

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "attest"))
from attest_helpers import RUN, key, make_signed  # noqa: E402

NODE = identity_from_seed(hashlib.sha256(b"read-only media node").digest())
# $1 becomes read-only in this namespace only; then the rest of the arguments run there.
READONLY = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'


def _namespace() -> list[str]:
    """The command prefix that enters a private mount namespace, after checking a read-only bind works."""
    prefixes = [["unshare", "-m"]] if os.geteuid() == 0 else []
    prefixes.append(["unshare", "-rm"])
    reason = "unshare is not installed (util-linux)"
    for prefix in prefixes if shutil.which("unshare") and shutil.which("mount") else []:
        probe = subprocess.run(
            [*prefix, "sh", "-c", READONLY, "sh", "/tmp", "sh", "-c", "! touch /tmp/.p2paudit-ro-probe"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if probe.returncode == 0:
            return prefix
        reason = f"{' '.join(prefix)} cannot remount read-only here: {probe.stderr.strip()[:200]}"
    skip_or_fail("the read-only media tests", reason)


def _ledger(directory: Path, keep_wal: bool) -> Path:
    """A ledger of 4 steps with a dispute at step 1, copied to `directory` as its files lie on disk.

    With `keep_wal` the copy is taken while another connection holds the file
    open, as a snapshot of a live ledger would be: its last entry is only in
    the -wal file, beside the -shm index.
    """
    live = directory.parent / "live"
    live.mkdir()
    path = live / "ledger.db"
    with AttestationStore.open(path, origin_for(NODE.public_key)) as store:
        store.register_run(RUN, 4, "media")
        for item in [
            make_signed(key(1), step=0),
            make_signed(key(1), step=1),
            make_signed(key(2), step=1, verdict="mismatch"),
        ]:
            store.append(item.encoded)
        store.checkpoint(NODE)
    keep = sqlite3.connect(path) if keep_wal else None
    if keep is not None:  # the last closer checkpoints the -wal into the file; this one stays open
        keep.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        with AttestationStore.open(path) as store:
            store.append(make_signed(key(3), step=2).encoded)
    shutil.copytree(live, directory)
    if keep is not None:
        keep.close()
    return directory / "ledger.db"


def _readonly(prefix: list[str], directory: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, P2PAUDIT_HOME=str(directory / "home"))
    command = [*prefix, "sh", "-c", READONLY, "sh", str(directory), sys.executable, "-m", "p2paudit", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("keep_wal", [False, True], ids=["closed", "with-wal"])
def test_a_ledger_on_a_readonly_file_system_can_be_read(tmp_path, keep_wal):
    prefix = _namespace()
    path = _ledger(tmp_path / "media", keep_wal)
    entries = 4 if keep_wal else 3
    show = _readonly(prefix, path.parent, "ledger", "show", "--step", "1", "--ledger", str(path))
    assert show.returncode == 0, show.stderr
    assert "step 1: 2 attestations" in show.stdout
    verify = _readonly(prefix, path.parent, "ledger", "verify", "--ledger", str(path))
    assert verify.returncode == 0, verify.stderr
    assert f"ok: {entries} entries" in verify.stdout
    coverage = _readonly(prefix, path.parent, "ledger", "coverage", "--ledger", str(path))
    assert coverage.returncode == 0, coverage.stderr
    assert "steps with a mismatch: 1" in coverage.stdout
    # Nothing was written: the directory holds what it held.
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        ["ledger.db"] + (["ledger.db-shm", "ledger.db-wal"] if keep_wal else [])
    )


def test_a_write_to_a_readonly_ledger_is_refused_in_one_line(tmp_path):
    prefix = _namespace()
    path = _ledger(tmp_path / "media", False)
    signed = tmp_path / "entry.bin"
    signed.write_bytes(make_signed(key(4), step=3).encoded)
    result = _readonly(prefix, path.parent, "ledger", "import", str(signed), "--ledger", str(path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "read-only" in lines[0], result.stderr
