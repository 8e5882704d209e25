"""A full disk during `verify-range --attest`: the one-line error says exactly which attestations were stored.

The ledger lives on a small tmpfs mounted in a private mount namespace
(`unshare -m` as root, `unshare -rm` otherwise); a driver fills it completely
once two attestations are stored, so the third commit meets a real ENOSPC.
Where mount namespaces cannot be made the test skips with one line, and fails
when the CI environment variable is set.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from p2paudit.identity import identity_from_seed, save_identity
from p2paudit.run.publisher import TrainPlan, publish_run
from tests.small_disk import namespace_prefix

PUBLISHER = identity_from_seed(b"\x5f" * 32)
NODE = identity_from_seed(b"\x60" * 32)
# $1 becomes a tmpfs of $2 bytes in this namespace; the driver runs there, then the ledger is copied out to $3.
SCRIPT = 'mount -t tmpfs -o size="$2" tmpfs "$1" && "${@:4}"; code=$?; cp "$1"/ledger.db* "$3"/; exit $code'
DRIVER = r"""
import errno, os, sys
from pathlib import Path
import p2paudit.attest.store as store
from p2paudit.cli import cli

mount, fill_after, args = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
append, calls = store.AttestationStore.sign_and_append, []

def fill(directory):
    # Write until the file system refuses a single byte more.
    with open(directory / "filler", "wb", buffering=0) as out:
        for size in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    out.write(b"\0" * size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise

def filling(self, identity, record):
    if len(calls) == fill_after:
        fill(mount)
    calls.append(record.step)
    return append(self, identity, record)

store.AttestationStore.sign_and_append = filling
sys.exit(cli.main(args, prog_name="p2paudit"))
"""


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> Path:
    """tiny, 4 steps, checkpoints of states 0, 2, 4."""
    run_dir = tmp_path_factory.mktemp("full") / "run"
    publish_run(TrainPlan(run_dir, "tiny", steps=4, ckpt_every=2, backend="cpu"), PUBLISHER)
    return run_dir


@pytest.mark.slow  # 6 s: a replay in a mount namespace (fast tier: pytest -m 'not slow')
def test_a_full_disk_mid_range_says_which_attestations_were_stored(small_run, tmp_path):
    from p2paudit.attest.store import AttestationStore

    prefix = namespace_prefix("the full-disk test")
    home, mount, out = tmp_path / "home", tmp_path / "disk", tmp_path / "out"
    for directory in (mount, out):
        directory.mkdir()
    save_identity(NODE, home / "node.key")
    args = ["verify-range", "0-3", "--run", str(small_run), "--backend", "reference", "--attest"]
    args += ["--ledger", str(mount / "ledger.db")]
    driver = [sys.executable, "-c", DRIVER, str(mount), "2", *args]
    env = dict(os.environ, P2PAUDIT_HOME=str(home))
    done = subprocess.run(
        [*prefix, "bash", "-c", SCRIPT, "bash", str(mount), str(1 << 20), str(out), *driver],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    # The initial state and step 0 were committed before the disk filled; step 1 met the full disk.
    assert last.startswith("Error: 2 of 5 attestations are stored (the initial state and step 0: ledger entries 0-1)")
    assert "step 1 and the 2 after it are not" in last and "full" in last and "nothing was stored" not in last
    with AttestationStore.open_readonly(out / "ledger.db") as store:
        assert store.ledger.size == 2
        assert [store.attestation(i).attestation.subject for i in (0, 1)] == ["init", "step"]
