"""SIGKILL at random moments while a real subprocess appends: nothing committed is lost, nothing half-written."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledger import Ledger, merkle

ORIGIN = "example.org/crash"

# The child appends deterministic entries (entry i is a function of i) in single appends and batches,
# keeps its own index table through the hook, now and then signs a checkpoint, and prints the ledger
# size after every commit.
CHILD = r"""
import hashlib, random, sys
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from ledger import Ledger, NoteSigner

def expected(i):
    return hashlib.sha256(b"%d" % i).digest() * (1 + i % 9)

def hook(conn, index):
    conn.execute("INSERT INTO my_index (idx, digest) VALUES (?, ?)", (index, hashlib.sha256(expected(index)).digest()))

path, seed = sys.argv[1], int(sys.argv[2])
rng = random.Random(seed)
signer = NoteSigner("example.org/crash", Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
with Ledger.open(path, "example.org/crash") as lg:
    lg.conn.execute("CREATE TABLE IF NOT EXISTS my_index (idx INTEGER PRIMARY KEY, digest BLOB NOT NULL)")
    print(lg.size, flush=True)
    while True:
        n = lg.size
        if rng.random() < 0.5:
            lg.append(expected(n), hook)
            n += 1
        else:
            k = rng.randrange(2, 300)
            lg.append_many([expected(i) for i in range(n, n + k)], hook)
            n += k
        if rng.random() < 0.05:
            lg.checkpoint(signer)
        print(n, flush=True)
"""


def expected(i: int) -> bytes:
    return hashlib.sha256(b"%d" % i).digest() * (1 + i % 9)


def _run_and_kill(path, seed: int, rng: random.Random) -> int:
    """Start the child, let it append for a random while, SIGKILL it; return the last size it reported committed."""
    repo = str(Path(__file__).resolve().parents[2])  # the child imports this checkout's ledger package
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(seed)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        first = proc.stdout.readline()  # the child is up and the ledger is open
        assert first.strip().isdigit(), proc.stderr.read().decode()[-2000:]
        time.sleep(rng.uniform(0.05, 0.6))
    finally:
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    lines = (first + out).decode().split("\n")[:-1]  # a line cut by the kill has no newline: ignore it
    return int(lines[-1])


@pytest.mark.slow
def test_sigkill_at_random_moments_loses_nothing_committed(tmp_path):
    path = tmp_path / "crash.db"
    rng = random.Random(20261129)
    reported_total = 0
    checkpoints = 0
    for round_ in range(6):
        reported = _run_and_kill(path, round_, rng)
        assert reported >= reported_total
        reported_total = reported
        with Ledger.open(path, ORIGIN) as lg:
            size = lg.size
            # Every commit the child saw succeed is there; anything past it is whole (a later commit).
            assert size >= reported, f"round {round_}: child reported {reported} committed, ledger has {size}"
            stored = list(lg.entries())
            assert len(stored) == size
            for i, data in enumerate(stored):
                assert data == expected(i), f"round {round_}: entry {i} is not what was appended"
            digests = lg.conn.execute("SELECT idx, digest FROM my_index ORDER BY idx").fetchall()
            assert digests == [
                (i, hashlib.sha256(expected(i)).digest()) for i in range(size)
            ]  # the hook's table moved in step
            report = lg.verify()  # also checks every checkpoint the child signed against the entries
            assert report.ok, report.problems
            checkpoints += report.checkpoints_checked
            assert (
                report.root
                == lg.root()
                == merkle.root_from_leaf_hashes([merkle.leaf_hash(expected(i)) for i in range(size)])
            )
    assert checkpoints > 0, "no checkpoint was signed in any round"
    assert reported_total >= 1000, (
        f"only {reported_total} entries appended over all rounds: the test did not exercise much"
    )
