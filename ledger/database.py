"""Opening a ledger's SQLite file, and saying in one line what is wrong when SQLite refuses.

Every file is opened through a `file:` URI built here: the absolute path
percent-encoded byte for byte, so a '#', '?', '%' or space in a directory
name stays part of the name (an unescaped '#' ends a URI's path: SQLite
would open, and create, a file named by the part before it).

Read-only opens use `mode=ro`, so a query, a proof or `verify` needs no
write permission anywhere. A WAL database needs its -shm file to be read; a
read-only directory after the last writer closed holds no -shm and none can
be made (SQLITE_READONLY_DIRECTORY), nor can one on a read-only file system
(a CD, a read-only mount or snapshot: SQLITE_CANTOPEN). Then, and only when
no -wal file exists either (so every committed entry is in the file itself),
the file is opened with `immutable=1`: read without locks. On a read-only
file system nothing can write it; in a read-only directory a writer that
starts during the read could make it see a torn snapshot; nothing is
written through it. A -wal and -shm left beside a file on read-only media
(a snapshot of a live ledger) are read as they are, by SQLite's own
read-only WAL mode.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import urllib.parse

from ledger.errors import CorruptLedgerError, LedgerError

BUSY_TIMEOUT_S = 60.0
_LOW_DISK_BYTES = 1 << 20  # below this much free space an I/O error is reported as a full disk


def database_uri(path: str, mode: str, immutable: bool = False) -> str:
    """The SQLite URI of the file `path` in `mode` ("ro", "rw" or "rwc"), every special character escaped."""
    if mode not in ("ro", "rw", "rwc"):
        raise LedgerError(f"SQLite open mode {mode!r} is not ro, rw or rwc")
    encoded = urllib.parse.quote(os.fsencode(os.path.abspath(path)), safe="/")
    return f"file:{encoded}?mode={mode}{'&immutable=1' if immutable else ''}"


def connect(path: str, readonly: bool = False) -> sqlite3.Connection:
    """Open the ledger file: read-only (mode=ro, no pragma writes), or read-write in WAL mode with full sync.

    A read-write open creates the file if it is missing (its directory must
    exist). Autocommit mode: the ledger issues BEGIN IMMEDIATE itself.
    Raises LedgerError (or CorruptLedgerError) with a one-line reason.
    """
    if path == ":memory:":
        if readonly:
            raise LedgerError("an in-memory ledger cannot be opened read-only")
        return _configure(sqlite3.connect(path, isolation_level=None), path)
    action = "be read" if readonly else "be opened for writing"
    try:
        conn = _open(path, "ro" if readonly else "rwc")
    except sqlite3.Error as exc:
        raise describe_error(exc, path, action) from None
    if readonly:
        return conn
    return _configure(conn, path)


def _open(path: str, mode: str) -> sqlite3.Connection:
    conn = sqlite3.connect(database_uri(path, mode), uri=True, isolation_level=None, timeout=BUSY_TIMEOUT_S)
    if mode != "ro":
        return conn
    try:
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()  # SQLite opens lazily: touch the file now
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        if not _unwritable(path, exc) or _has_wal_files(path):
            raise
    conn = sqlite3.connect(database_uri(path, "ro", immutable=True), uri=True, isolation_level=None)
    conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    return conn


def _unwritable(path: str, exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused to read because no -shm file can be made beside `path` (nothing else)."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name == "SQLITE_READONLY_DIRECTORY":
        return True
    return name.startswith("SQLITE_CANTOPEN") and _on_readonly_file_system(path)


def _on_readonly_file_system(path: str) -> bool:
    try:
        return bool(os.statvfs(os.path.dirname(os.path.abspath(path))).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _has_wal_files(path: str) -> bool:
    return os.path.lexists(path + "-wal") or os.path.lexists(path + "-shm")


def _configure(conn: sqlite3.Connection, path: str) -> sqlite3.Connection:
    try:
        mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA recursive_triggers=ON")
    except sqlite3.Error as exc:
        conn.close()
        raise describe_error(exc, path, "be opened for writing") from None
    if mode.lower() != "wal" and path != ":memory:":
        conn.close()
        raise LedgerError(f"ledger {path}: could not switch to WAL journal mode (got {mode})")
    return conn


# (error-name prefix, words SQLite's message uses) -> what is really wrong
_READONLY = ("SQLITE_READONLY", "readonly database")
_FULL = ("SQLITE_FULL", "database or disk is full")
_BUSY = ("SQLITE_BUSY", "database is locked")
_LOCKED = ("SQLITE_LOCKED", "database table is locked")
_NOTADB = ("SQLITE_NOTADB", "file is not a database")
_CORRUPT = ("SQLITE_CORRUPT", "database disk image is malformed")
_CANTOPEN = ("SQLITE_CANTOPEN", "unable to open database file")
_IOERR = ("SQLITE_IOERR", "disk i/o error")
_PERM = ("SQLITE_PERM", "access permission denied")


def _is(exc: sqlite3.Error, kind: tuple[str, str]) -> bool:
    name = getattr(exc, "sqlite_errorname", None) or ""
    if name:
        return name.startswith(kind[0])
    return kind[1] in str(exc).lower()


def describe_error(exc: sqlite3.Error, path: str, action: str) -> LedgerError:
    """A one-line LedgerError saying what is really wrong with the ledger at `path` that `action` failed on.

    `action` completes "ledger PATH cannot ...", e.g. "be read", "store the
    entries". Uses SQLite's extended error name when there is one, else the
    words of its message; an I/O error on a nearly full disk is called a full disk.
    """
    where = f"ledger {path} cannot {action}"
    name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    if _is(exc, _NOTADB):
        return CorruptLedgerError(f"{path} is not a p2paudit ledger: it is not a SQLite database ({name})", None)
    if _is(exc, _CORRUPT):
        return CorruptLedgerError(
            f"ledger {path} is corrupt: SQLite reports a malformed database ({name}); "
            "keep the file as evidence and restore a copy",
            None,
        )
    if _is(exc, _READONLY):
        return LedgerError(
            f"{where}: the file or its directory is read-only ({name}); "
            "queries and verify open it read-only, writes need write permission"
        )
    free = _free_bytes(path) if _is(exc, _FULL) or _is(exc, _IOERR) else None
    if _is(exc, _FULL) or (_is(exc, _IOERR) and free is not None and free < _LOW_DISK_BYTES):
        left = f", {free} bytes free" if free is not None else ""
        return LedgerError(f"{where}: the disk holding it is full{left} ({name})")
    if _is(exc, _BUSY) or _is(exc, _LOCKED):
        return LedgerError(
            f"{where}: the database is locked by another process (waited {BUSY_TIMEOUT_S:.0f} s) ({name})"
        )
    if _is(exc, _CANTOPEN) or _is(exc, _PERM):
        return LedgerError(f"{where}: {_why_unopenable(path)} ({name})")
    if _is(exc, _IOERR):
        return LedgerError(f"{where}: the operating system reported an I/O error ({name})")
    return LedgerError(f"{where}: {exc} ({name})")


def _free_bytes(path: str) -> int | None:
    try:
        return shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
    except OSError:
        return None


def _why_unopenable(path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"its directory {directory} does not exist"
    if os.path.isdir(path):
        return "it is a directory"
    if _on_readonly_file_system(path):
        return "it is on a read-only file system"
    if not os.path.lexists(path):
        return "the file does not exist" + ("" if os.access(directory, os.W_OK) else " and its directory is read-only")
    if not os.access(path, os.R_OK):
        return "permission denied"
    return "SQLite could not open it"
