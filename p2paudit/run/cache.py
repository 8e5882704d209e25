"""A bounded on-disk cache of verified run files, content-addressed, evicted least recently used first.

Layout of a cache directory:

    CACHE/
      .lock                      flock held while a process fetches into the cache
      blobs/KEY                  a verified file (KEY: "shard-<hex>", "state-<hex>", "trace-<hex>", "batch-<hex>")
      blobs/KEY.partial          an unverified download in progress, resumed with an HTTP Range request
      blobs/KEY.partial.PID-RAND a second thread's download of KEY while another holds KEY.partial (removed after)
      views/PID-RAND/NAME/       a run directory made of hard links to blobs, for one command

A blob is named by the digest it was verified against (a shard's file digest,
a checkpoint's state digest, a trace's file digest), so any run that claims
the same digest can reuse it. A file reaches its final name only by a rename
after its verification: nothing unverified is ever under a final name.
Recency is the file's access time, set explicitly on every use (mounts with
`noatime` or `relatime` would not keep it). Views are removed when their
command ends; a view left by a killed process is removed by the next one.

One process fills a cache at a time (the flock); inside it several threads
may (a daemon fetches each remote run ahead in a thread of its own): they
share the one flock, the files a thread is placing are pinned, never
evicted under it, and a file is fetched into KEY.partial by one thread at a
time (key_lock). A thread that finds KEY.partial busy for KEY_WAIT_S (two
runs that share a blob, one of them on a stalled server) fetches its own
copy into a private partial instead of waiting: a stalled server never
holds up another run's fetch.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from p2paudit.errors import InputError
from p2paudit.processes import process_alive

PARTIAL_SUFFIX = ".partial"
KEY_WAIT_S = 2.0  # how long a thread waits for another's download of the same file before fetching its own
_KEY = re.compile(r"(shard|state|trace|batch)-[0-9a-f]{64}", re.ASCII)
_VIEW = re.compile(r"([0-9]{1,10})-[0-9a-f]{16}", re.ASCII)


class _Shared:
    """What the threads of this process share about one cache directory: its flock, pins, per-key locks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fd: int | None = None
        self.holders = 0
        self.pinned: Counter[str] = Counter()
        self.key_locks: dict[str, threading.Lock] = {}


_SHARED: dict[str, _Shared] = {}
_SHARED_LOCK = threading.Lock()


def _shared(root: Path) -> _Shared:
    with _SHARED_LOCK:
        return _SHARED.setdefault(os.path.abspath(root), _Shared())


@dataclass(frozen=True)
class CacheEntry:
    """One file of the cache: its path, size and last use (access time, seconds)."""

    path: Path
    size: int
    used: float


class BlobCache:
    """The cache directory `root`, holding at most `max_bytes` of blobs and partial downloads."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        if max_bytes < 1:
            raise InputError(f"cache size is {max_bytes} bytes, want at least 1")
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.blobs = self.root / "blobs"
        self.views = self.root / "views"
        self.shared = _shared(self.root)

    def final(self, key: str) -> Path:
        """The path of the verified blob `key` (it may not exist)."""
        if not _KEY.fullmatch(key):
            raise InputError(f"cache key {key[:80]!r} is not KIND-<64 hex>")
        return self.blobs / key

    def partial(self, key: str) -> Path:
        """The path of `key`'s unverified download in progress."""
        return self.final(key).with_name(key + PARTIAL_SUFFIX)

    def private_partial(self, key: str) -> Path:
        """A fresh path for one thread's own download of `key` (another thread holds `partial(key)`)."""
        return self.final(key).with_name(f"{key}{PARTIAL_SUFFIX}.{os.getpid()}-{secrets.token_hex(8)}")

    def lookup(self, key: str) -> Path | None:
        """The blob `key` if it is cached as a regular file (its last use set to now), else None."""
        path = self.final(key)
        try:
            if not path.is_file() or path.is_symlink():
                return None
            touch(path)
        except OSError:
            return None
        return path

    def commit(self, key: str, partial: Path | None = None) -> Path:
        """Rename `key`'s verified partial download (`partial`, or the shared one) to its final name; the final
        path."""
        path = self.final(key)
        os.replace(partial if partial is not None else self.partial(key), path)
        touch(path)
        return path

    def discard(self, key: str, partial: Path | None = None) -> None:
        """Remove `key`'s partial download and its blob (both, if a check found them wrong); with a private
        `partial`, that file alone (the shared partial and the blob are other threads')."""
        if partial is not None and partial != self.partial(key):
            partial.unlink(missing_ok=True)
            return
        self.partial(key).unlink(missing_ok=True)
        self.final(key).unlink(missing_ok=True)

    def entries(self) -> list[CacheEntry]:
        """Every blob and partial download, least recently used first."""
        out = []
        for path in self.blobs.iterdir() if self.blobs.is_dir() else ():
            try:
                info = path.lstat()
            except FileNotFoundError:
                continue
            out.append(CacheEntry(path, info.st_size, info.st_atime))
        return sorted(out, key=lambda e: (e.used, e.path.name))

    def used_bytes(self) -> int:
        return sum(e.size for e in self.entries())

    def evict(self, keep: set[str], room: int = 0) -> list[Path]:
        """Remove least recently used files (never those of `keep` nor those another thread of this process
        pinned, partials included) until the cache holds at most max_bytes - room; the paths removed."""
        with self.shared.lock:
            keep = set(keep) | {key for key, count in self.shared.pinned.items() if count > 0}
        entries = self.entries()
        total, removed = sum(e.size for e in entries), []
        for entry in entries:
            if total + room <= self.max_bytes:
                break
            if entry.path.name.split(".", 1)[0] in keep:  # KEY, KEY.partial, KEY.partial.PID-RAND
                continue
            entry.path.unlink(missing_ok=True)
            total -= entry.size
            removed.append(entry.path)
        return removed

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the cache's exclusive lock for this process (threads of it share it); InputError at once if
        another process holds it."""
        self.blobs.mkdir(parents=True, exist_ok=True)
        self.views.mkdir(parents=True, exist_ok=True)
        shared = self.shared
        with shared.lock:
            if shared.holders == 0:
                fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    raise InputError(f"cache {self.root} is being filled by another process; try again") from None
                shared.fd = fd
            shared.holders += 1
        try:
            yield
        finally:
            with shared.lock:
                shared.holders -= 1
                if shared.holders == 0 and shared.fd is not None:
                    os.close(shared.fd)
                    shared.fd = None

    @contextmanager
    def pinned(self, keys: Iterable[str]) -> Iterator[None]:
        """Keep `keys` from being evicted by any thread of this process while the block runs."""
        keys = list(keys)
        with self.shared.lock:
            self.shared.pinned.update(keys)
        try:
            yield
        finally:
            with self.shared.lock:
                self.shared.pinned.subtract(keys)
                self.shared.pinned += Counter()  # drops the keys no thread pins any more

    @contextmanager
    def key_lock(self, key: str, wait: float = KEY_WAIT_S) -> Iterator[bool]:
        """Whether this thread holds `key`'s shared partial for the block: True once no other thread of this
        process does (waiting at most `wait` seconds), else False (fetch into a private_partial)."""
        with self.shared.lock:
            lock = self.shared.key_locks.setdefault(key, threading.Lock())
        owned = lock.acquire(timeout=wait)
        try:
            yield owned
        finally:
            if owned:
                lock.release()

    @contextmanager
    def view(self, name: str) -> Iterator[Path]:
        """A fresh empty directory views/PID-RAND/NAME, removed (with views of dead processes) on exit."""
        self.views.mkdir(parents=True, exist_ok=True)
        self._remove_stale_views()
        holder = self.views / f"{os.getpid()}-{secrets.token_hex(8)}"
        path = holder / name
        path.mkdir(parents=True)
        try:
            yield path
        finally:
            shutil.rmtree(holder, ignore_errors=True)

    def _remove_stale_views(self) -> None:
        for holder in self.views.iterdir():
            match = _VIEW.fullmatch(holder.name)
            if match is not None and not process_alive(int(match.group(1))):
                shutil.rmtree(holder, ignore_errors=True)


def touch(path: Path) -> None:
    """Set `path`'s access time to now (its last use), keeping its modification time."""
    info = path.stat()
    os.utime(path, ns=(time.time_ns(), info.st_mtime_ns))


def link_or_copy(source: Path, target: Path) -> None:
    """Put `source`'s file at `target` as a hard link (a copy where links are not possible)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
