"""`p2paudit ledger ...` against hostile paths and unusable files: odd characters in the home, a
read-only home, FIFOs and devices as input, SQLite errors, and exit codes 2 versus 3."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

import ledger
import ledger.database
from ledger import NoteVerifier, ProofError, open_checkpoint
from p2paudit.attest import queries
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.cli import cli
from p2paudit.identity import identity_from_seed, save_identity

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "attest"))
from attest_helpers import RUN, key, make_signed

NODE = identity_from_seed(hashlib.sha256(b"cli files node").digest())
A, B = key(1), key(2)
ODD = "odd #1?x=%41 &y a b"  # '#' ends a URI path, '?' starts its query, '%41' decodes to 'A'


def run(home: Path, *args: str):
    return CliRunner().invoke(cli, list(args), env={"P2PAUDIT_HOME": str(home)})


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


@contextmanager
def returns_within(seconds: int):
    """Fail instead of hanging when a command blocks (a FIFO opened for reading waits for a writer)."""

    def expired(signum, frame):
        raise TimeoutError(f"the command did not return within {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def all_files(root: Path) -> set[Path]:
    return {Path(d) / f for d, _, files in os.walk(root) for f in files}


def fill(home: Path, inputs: Path) -> list[bytes]:
    save_identity(NODE, home / "node.key")
    result = run(home, "ledger", "add-run", "--id", RUN.hex(), "--steps", "4")
    assert result.exit_code == 0, result.output
    items = [
        make_signed(A, step=0).encoded,
        make_signed(B, step=0, verdict="mismatch").encoded,
        make_signed(A, step=1).encoded,
    ]
    inputs.mkdir(exist_ok=True)
    for n, item in enumerate(items):
        path = inputs / f"a{n}.bin"
        path.write_bytes(item)
        result = run(home, "ledger", "import", str(path))
        assert result.exit_code == 0, result.output
    return items


def test_a_home_with_hash_question_mark_percent_and_spaces_works_and_writes_nowhere_else(tmp_path):
    home = tmp_path / ODD / "home ?#"
    items = fill(home, tmp_path / "inputs")
    for args in (
        ["coverage", "--run", RUN.hex()],
        ["disputes"],
        ["equivocations"],
        ["show", "--step", "0"],
        ["proof", "--index", "1"],
        ["consistency", "1", "3"],
        ["export", "--index", "2"],
        ["verify"],
        ["checkpoint"],
        ["checkpoint"],
    ):
        result = run(home, "ledger", *args)
        assert result.exit_code == 0, (args, result.output)
    assert "ok: 3 entries" in run(home, "ledger", "verify").output
    with AttestationStore.open(home / "ledger.db") as store:
        assert [store.ledger.entry(i) for i in range(3)] == items
    inputs = {tmp_path / "inputs" / f"a{n}.bin" for n in range(3)}
    stray = all_files(tmp_path) - inputs - {home / "node.key"} - {home / f"ledger.db{s}" for s in ("", "-wal", "-shm")}
    assert stray == set()
    assert not (tmp_path / "odd ").exists() and not Path("odd ").exists()


def test_import_refuses_a_fifo_and_a_device_at_once_with_one_line(tmp_path):
    home = tmp_path / "home"
    fill(home, tmp_path / "inputs")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    with returns_within(10):
        line = one_line_error(run(home, "ledger", "import", str(fifo)), 2)
        assert f"{fifo} is" in line and "not a regular file" in line
        assert f"{zero} is a symbolic link" in one_line_error(run(home, "ledger", "import", str(zero)), 2)
        assert "not a regular file" in one_line_error(run(home, "ledger", "import", "/dev/zero"), 2)
    big = tmp_path / "big.json"
    big.write_bytes(b"{" + b" " * (64 * 1024))
    assert "has 65537 bytes, more than the 65536 allowed" in one_line_error(run(home, "ledger", "import", str(big)), 2)


def test_import_into_a_missing_ledger_creates_nothing(tmp_path):
    home = tmp_path / "home"
    save_identity(NODE, home / "node.key")
    item = tmp_path / "a.bin"
    item.write_bytes(make_signed(A, step=0).encoded)
    target = tmp_path / "new.db"
    line = one_line_error(run(home, "ledger", "import", str(item), "--ledger", str(target)), 2)
    assert f"no ledger at {target}" in line
    line = one_line_error(run(home, "ledger", "import", str(item)), 2)
    assert "no ledger at" in line and "add-run" in line
    assert all_files(tmp_path) == {item, home / "node.key"}


def test_queries_open_the_ledger_read_only(tmp_path, monkeypatch):
    home = tmp_path / "home"
    fill(home, tmp_path / "inputs")
    seen = []
    real = queries.coverage

    def spy(store, *args, **kwargs):
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            store.conn.execute("INSERT INTO attest_batches (first_leaf, count) VALUES (100, 1)")
        seen.append(store.ledger.readonly)
        return real(store, *args, **kwargs)

    monkeypatch.setattr(queries, "coverage", spy)
    assert run(home, "ledger", "coverage", "--run", RUN.hex()).exit_code == 0
    assert seen == [True, True] or seen == [True]
    with AttestationStore.open_readonly(home / "ledger.db") as store:
        for statement in (
            "INSERT INTO entries (idx, leaf_hash, data) VALUES (3, zeroblob(32), x'00')",
            "CREATE TABLE t (x)",
        ):
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                store.conn.execute(statement)
        with pytest.raises(sqlite3.OperationalError):
            store.conn.execute("PRAGMA journal_mode=DELETE")
        with pytest.raises(ledger.LedgerInvariantError, match="opened read-only"):
            store.ledger.append(b"x")


def _as_nobody_available() -> bool:
    return os.geteuid() == 0 and shutil.which("setpriv") is not None


@pytest.mark.skipif(not _as_nobody_available(), reason="needs root and setpriv to run a command as another user")
@pytest.mark.parametrize("wal_files", [False, True], ids=["closed-by-a-writer", "wal-and-shm-left-by-a-reader"])
def test_a_read_only_home_can_still_be_queried_and_verified(wal_files):
    # Root ignores permission bits, so the commands run as user 65534 in a directory it cannot write.
    base = Path(tempfile.mkdtemp(prefix="p2paudit-ro-", dir="/tmp"))
    os.chmod(base, 0o755)
    try:
        home = base / "home"
        fill(home, base / "inputs")
        assert run(home, "ledger", "checkpoint").exit_code == 0
        note = run(home, "ledger", "checkpoint").output  # the last connection was read-only: -wal, -shm stay
        if not wal_files:
            AttestationStore.open(home / "ledger.db").close()  # the last writer to close removes them
        for name in ("ledger.db-wal", "ledger.db-shm"):
            assert (home / name).exists() == wal_files
        for path in [base, home, *home.iterdir()]:  # the user's own home and key, none of it writable
            os.chown(path, 65534, 65534)
            os.chmod(path, 0o555 if path.is_dir() else 0o400 if path.name == "node.key" else 0o444)

        def as_nobody(*args: str) -> subprocess.CompletedProcess:
            code = "import sys; from p2paudit.cli import cli; sys.exit(cli.main(prog_name='p2paudit'))"
            return subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code, *args],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                env={**os.environ, "P2PAUDIT_HOME": str(home), "HOME": str(base)},
            )

        probe = as_nobody("--version")
        if probe.returncode != 0:
            pytest.skip(f"user 65534 cannot run the CLI here: {probe.stderr.strip()[-200:]}")
        verified = as_nobody("ledger", "verify")
        assert verified.returncode == 0 and "ok: 3 entries" in verified.stdout, verified.stderr
        for args in (
            ["coverage", "--run", RUN.hex()],
            ["disputes"],
            ["show", "--step", "0"],
            ["proof", "--index", "2"],
            ["consistency", "1", "3"],
            ["export", "--index", "0", "--dsse"],
        ):
            result = as_nobody("ledger", *args)
            assert result.returncode == 0, (args, result.stderr)
        assert as_nobody("ledger", "checkpoint").stdout == note  # current: shown, not signed again
        item = base / "inputs" / "new.bin"
        item.write_bytes(make_signed(B, step=1).encoded)
        refused = as_nobody("ledger", "import", str(item))
        assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "read-only" in refused.stderr, refused.stderr
        left = ["ledger.db", "ledger.db-shm", "ledger.db-wal"] if wal_files else ["ledger.db"]
        assert sorted(p.name for p in home.iterdir()) == left + ["node.key"]
    finally:
        for d, dirs, _ in os.walk(base):
            os.chmod(d, 0o755)
        shutil.rmtree(base)


@pytest.mark.parametrize(
    "message,names,words",
    [
        ("attempt to write a readonly database", "SQLITE_READONLY", "the file or its directory is read-only"),
        ("database or disk is full", "SQLITE_FULL", "the disk holding it is full"),
        ("database is locked", "SQLITE_BUSY", "locked by another process (waited 60 s)"),
        ("file is not a database", "SQLITE_NOTADB", "is not a p2paudit ledger: it is not a SQLite database"),
        ("database disk image is malformed", "SQLITE_CORRUPT", "is corrupt"),
        ("unable to open database file", "SQLITE_CANTOPEN", "the file does not exist"),
    ],
)
def test_sqlite_errors_say_what_is_wrong(tmp_path, message, names, words):
    path = str(tmp_path / "gone" / ".." / "ledger.db")
    error = ledger.database.describe_error(sqlite3.OperationalError(message), path, "be read")
    assert words in str(error) and "\n" not in str(error) and error.exit_code == 2
    named = sqlite3.OperationalError("something else entirely")
    named.sqlite_errorname = names  # SQLite's extended name wins over the words of its message
    assert words in str(ledger.database.describe_error(named, path, "be read"))


def test_an_io_error_on_a_full_disk_is_called_a_full_disk(tmp_path, monkeypatch):
    home = tmp_path / "home"
    fill(home, tmp_path / "inputs")

    def failing(*args, **kwargs):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(queries, "coverage", failing)
    line = one_line_error(run(home, "ledger", "coverage", "--run", RUN.hex()), 2)
    assert "cannot answer the query: the operating system reported an I/O error" in line
    monkeypatch.setattr(ledger.database, "_free_bytes", lambda path: 4096)
    line = one_line_error(run(home, "ledger", "coverage", "--run", RUN.hex()), 2)
    assert "cannot answer the query: the disk holding it is full, 4096 bytes free" in line


def test_a_file_that_is_not_a_ledger_or_is_corrupt_is_named_so(tmp_path):
    home = tmp_path / "home"
    save_identity(NODE, home / "node.key")
    (home / "ledger.db").write_bytes(b"not sqlite at all " * 300)
    assert "is not a p2paudit ledger: it is not a SQLite database" in one_line_error(run(home, "ledger", "verify"), 2)
    other = tmp_path / "other"
    fill(other, tmp_path / "inputs")
    with open(other / "ledger.db", "r+b") as f:  # keep the header, wreck every page after the first
        f.seek(4096)
        f.write(b"\xff" * (os.path.getsize(other / "ledger.db") - 4096))
    line = one_line_error(run(other, "ledger", "verify"), 2)
    assert "is corrupt" in line or "not a p2paudit ledger" in line


def test_a_proof_from_the_empty_tree_is_refused_and_0_to_0_is_trivial(tmp_path):
    home = tmp_path / "home"
    fill(home, tmp_path / "inputs")
    line = one_line_error(run(home, "ledger", "consistency", "0", "3"), 2)
    assert "no consistency proof from the empty tree to size 3" in line
    result = run(home, "ledger", "consistency", "0", "0")
    assert result.exit_code == 0 and "size 0 root e3b0c442" in result.output


def test_a_proof_the_ledger_cannot_check_is_our_fault_not_a_mismatch(tmp_path, monkeypatch):
    home = tmp_path / "home"
    fill(home, tmp_path / "inputs")

    def broken(*args):
        raise ProofError("planted failure")

    monkeypatch.setattr(ledger, "verify_inclusion", broken)
    monkeypatch.setattr(ledger, "verify_consistency", broken)
    line = one_line_error(run(home, "ledger", "proof", "--index", "1"), 3)
    assert "own proof does not verify although the ledger does: planted failure" in line
    assert one_line_error(run(home, "ledger", "consistency", "1", "3"), 3)


def test_checkpoint_is_shown_without_signing_again_when_current(tmp_path):
    home = tmp_path / "home"
    fill(home, tmp_path / "inputs")
    first = run(home, "ledger", "checkpoint").output
    assert run(home, "ledger", "checkpoint").output == first
    with AttestationStore.open(home / "ledger.db") as store:
        assert store.conn.execute("SELECT COUNT(*) FROM checkpoints").fetchone()[0] == 1
    item = tmp_path / "more.bin"
    item.write_bytes(make_signed(B, step=2).encoded)
    assert run(home, "ledger", "import", str(item)).exit_code == 0
    grown = run(home, "ledger", "checkpoint").output
    cp = open_checkpoint(grown, NoteVerifier(origin_for(NODE.public_key), NODE.public_key))
    assert grown != first and cp.size == 4
