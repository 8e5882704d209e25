"""A run published on a web server: fetch what a range of steps needs, verify it piece by piece, cache
it, and lay it out as a local run directory that the replay reads.

Order of trust: manifest.sig.json first (at most MAX_SIGNATURE_BYTES): its
envelope gives the run id (the SHA-256 of manifest.json) and the publisher's
key, which is held against the pinned publishers (`--publisher`) before
anything else is fetched. Then manifest.json, streamed to a temporary file in
the cache directory (never held whole in memory before it is checked), its
declared (Content-Length) and observed size capped at MAX_MANIFEST_BYTES and
its digest checked against the run id as it arrives; only a body whose digest
is the run id is read back and checked exactly as read_manifest checks a
local one (Ed25519 signature, every field). The format signs the body with
pure Ed25519, whose check needs the whole message at once, so that is the one
step that holds it. The memory the replay needs is then checked
(engine.memory) before anything else is fetched. Then only what steps A..B
need:

- the shards holding the windows that steps c..B read (c the nearest
  checkpoint <= A; run.remote_files plans them from the manifest alone),
  each checked against its file digest and size in the manifest; `init`
  alone fetches every shard (it is the replay that checks the data key);
- the checkpoints of states c..B+1, fetched tensor by tensor with HTTP Range
  requests: the 8-byte header length, the JSON header (parsed strictly by
  run.checkpoint_layout against the config's shapes, its metadata checked),
  then the tensors' byte ranges (consecutive ones in one request of up to
  REQUEST_BYTES), each tensor checked against the manifest's per-tensor
  digest before it is appended to the cache entry's `.partial` file. So a
  partial file only ever holds verified bytes, a broken transfer resumes at
  the first tensor not yet verified, and a bad tensor is refused by name;
- the published traces of steps c..B, if any (whole files, digest-checked).

A server that ignores Range (answers 200 to a Range request) is read once
from byte 0 instead, each tensor still verified as it passes. Every file is
checked again as a whole before it takes its final name in the cache
(p2paudit.run.cache), and again by the replay, which reads a view of hard
links to the cached files (p2paudit.audit.remote_view for the partial token
stream).

HTTP (run.run_http: timeouts, same-scheme redirects, no content coding, one
line of InputError naming the URL per failure): a partial shard or trace
download is resumed with `Range: bytes=N-`, and a server that answers 200
instead of 206 is read from byte 0 again.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from p2paudit.durable import naming_the_file
from p2paudit.engine.memory import check_fits
from p2paudit.errors import InputError
from p2paudit.identity import verify_signature
from p2paudit.run.cache import BlobCache, link_or_copy
from p2paudit.run.checkpoint import (
    open_checkpoint,
)
from p2paudit.run.digest import format_digest
from p2paudit.run.http_guard import Resolver, TransferLimits, system_resolver
from p2paudit.run.http_replies import CHUNK_BYTES, Stream, check_content_range, check_length, check_range_reply
from p2paudit.run.manifest import (
    LAB_SIGNATURE_DOMAIN,
    MANIFEST_FILE,
    MAX_MANIFEST_BYTES,
    MAX_SIGNATURE_BYTES,
    SIGNATURE_FILE,
    Manifest,
    manifest_from_bytes,
    parse_signature,
)
from p2paudit.run.remote_checkpoint import CheckpointPieces, Pieces, Refused
from p2paudit.run.remote_files import RemoteFile, files_for_range
from p2paudit.run.run_http import CONNECT_TIMEOUT, READ_TIMEOUT, FetchStats, Progress, RunHttp
from p2paudit.run.step_shards import replay_memory, shards_for_range

REQUEST_BYTES = 4 << 20  # consecutive tensors of a checkpoint are asked for in one Range request up to this


def is_remote(run: str) -> bool:
    """True when `run` names a run by an http:// or https:// URL rather than a directory."""
    return run[:8].lower().startswith(("http://", "https://"))


class RemoteRun:
    """A run at `base_url`: the checked manifest, and `local_view` to fetch and lay out a range of steps.

    Use as a context manager (it holds an HTTP client). `on_progress` is
    called as bytes arrive; `stats` counts what was received and what the cache served.
    `publishers`: when given, the run is refused (naming the signature's URL) unless its
    manifest.sig.json names one of these keys, before its manifest or anything else is fetched.
    `limits` (connect and read timeouts, deadline, rate floor, redirects) replace the two timeouts.
    """

    def __init__(
        self,
        base_url: str,
        cache: BlobCache,
        on_progress: Progress | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        request_bytes: int = REQUEST_BYTES,
        publishers: frozenset[bytes] | None = None,
        limits: TransferLimits | None = None,
        resolve: Resolver = system_resolver,
    ) -> None:
        self.http = RunHttp(base_url, on_progress, connect_timeout, read_timeout, limits, resolve)
        self.publishers = publishers
        self.cache = cache
        self.request_bytes = max(1, request_bytes)
        self._manifest: Manifest | None = None
        self._signed: tuple[bytes, bytes] | None = None  # (manifest.sig.json, manifest.json) once fetched

    def __enter__(self) -> RemoteRun:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    @property
    def base(self) -> httpx.URL:
        return self.http.base

    @property
    def stats(self) -> FetchStats:
        return self.http.stats

    def url(self, path: str) -> httpx.URL:
        return self.http.url(path)

    def signed_body(self) -> tuple[bytes, bytes]:
        """(manifest.sig.json, manifest.json) as fetched (once): the signature's key held against the pinned
        publishers before the body is fetched, the body's size bounded and its SHA-256 the signature's run id.
        The signature itself is checked by the reader of the body's format (an engine or a lab manifest)."""
        if self._signed is None:
            sig = self.http.fetch_small(SIGNATURE_FILE, MAX_SIGNATURE_BYTES)
            run_id, key, _ = parse_signature(sig, str(self.url(SIGNATURE_FILE)))
            if self.publishers is not None and key not in self.publishers:
                want = ", ".join(sorted(k.hex() for k in self.publishers))
                raise InputError(
                    f"{self.url(SIGNATURE_FILE)}: the run is signed by {key.hex()}, not by the expected publisher {want}"
                )
            self._signed = (sig, self._fetch_body(run_id))
        return self._signed

    def signed_as_lab(self) -> bool:
        """Whether the fetched manifest's signature verifies under a lab run's domain (run.lab_run): which
        reader checks it, decided from the signature alone, without parsing a body of up to
        MAX_MANIFEST_BYTES twice. A body signed so is a lab run's claim whatever it holds: the lab
        reader checks every field; an engine manifest's signature never verifies under that domain."""
        sig, body = self.signed_body()
        _, key, signature = parse_signature(sig, str(self.url(SIGNATURE_FILE)))
        return verify_signature(key, signature, LAB_SIGNATURE_DOMAIN + body)

    @property
    def manifest(self) -> Manifest:
        """The run's manifest, fetched (once) and checked as read_manifest checks a local one."""
        if self._manifest is None:
            sig, body = self.signed_body()
            self._manifest = manifest_from_bytes(body, sig, str(self.url(MANIFEST_FILE)), str(self.url(SIGNATURE_FILE)))
        return self._manifest

    def _fetch_body(self, run_id: bytes) -> bytes:
        """manifest.json's bytes, once their size is within MAX_MANIFEST_BYTES and their digest is `run_id`
        (spooled to a temporary file in the cache directory while they arrive, not held in memory)."""
        self.cache.root.mkdir(parents=True, exist_ok=True)
        with naming_the_file(self.cache.root), tempfile.TemporaryFile(dir=self.cache.root) as spool:
            hasher, size = hashlib.sha256(), 0
            with self.http.get(MANIFEST_FILE, {}) as (response, url):
                if response.status_code != 200:
                    raise InputError(f"{url}: HTTP {response.status_code} {response.reason_phrase}".rstrip())
                check_length(response, url, MAX_MANIFEST_BYTES, 0)
                for chunk in self.http.body(response, url, MANIFEST_FILE):
                    size += len(chunk)
                    if size > MAX_MANIFEST_BYTES:
                        raise InputError(f"{url} sent more than the {MAX_MANIFEST_BYTES} bytes allowed")
                    hasher.update(chunk)
                    spool.write(chunk)
            if hasher.digest() != run_id:
                raise InputError(
                    f"{url}: its digest {format_digest(hasher.digest())} is not the run id {format_digest(run_id)} "
                    f"in {self.url(SIGNATURE_FILE)} (refused before it was read)"
                )
            spool.seek(0)
            return spool.read()

    @contextmanager
    def local_view(
        self, first: int | None, last: int | None, ignore_memory: bool = False, mode: str = "auto"
    ) -> Iterator[Path]:
        """A local run directory holding the manifest and the verified files steps first..last need
        (see files_for_range), removed on exit; the cache is kept under its size bound.

        Unless `ignore_memory`, the memory a replay in `mode` (engine.memory.REPLAY_MODES) needs is
        checked right after the manifest is fetched, before any shard or checkpoint is (InputError,
        one line)."""
        manifest = self.manifest
        if not ignore_memory:
            steps = "init" if first is None or last is None else f"{first}-{last}"
            need = replay_memory(manifest, shards_for_range(manifest, first, last), mode)
            how = "in memory" if mode == "in-memory" else "streaming"
            check_fits(need, f"replaying steps {steps} of the run at {self.base} ({how})")
        files = files_for_range(manifest, first, last)
        with self.cache.view(self.view_name()) as view:
            self.place_files(files, view)
            yield view

    def view_name(self) -> str:
        """The name a local view of this run takes (the URL's last path segment)."""
        return self.base.path.rstrip("/").rsplit("/", 1)[-1] or "run"

    def place_files(self, files: list[RemoteFile], view: Path) -> None:
        """Write the signed manifest into `view` and place every file of `files` there, each fetched or taken
        from the cache and checked; the cache is kept under its size bound."""
        sig, body = self.signed_body()
        for name, data in ((MANIFEST_FILE, body), (SIGNATURE_FILE, sig)):
            with naming_the_file(view / name):
                (view / name).write_bytes(data)
        keys = {f.key for f in files}
        with self.cache.locked(), self.cache.pinned(keys):
            self._make_room(files)
            for item in files:
                self._place(item, view)
            self.cache.evict(keys)

    def _make_room(self, files: list[RemoteFile]) -> None:
        """Refuse a range whose files cannot fit; evict other files to make room for the missing ones."""
        need = sum(f.max_bytes for f in files if self.cache.lookup(f.key) is None)
        if need > self.cache.max_bytes:
            raise InputError(
                f"the steps need up to {need} bytes of files not yet cached, more than the cache's "
                f"{self.cache.max_bytes} (--cache-size)"
            )
        self.cache.evict({f.key for f in files}, room=need)

    def _place(self, item: RemoteFile, view: Path) -> None:
        """Put the verified file `item` at its path in `view`: from the cache, or fetched and checked (into the
        shared partial, or a private one when another thread of this process is fetching the same file)."""
        target = view / item.path
        if self._place_cached(item, view, target):  # no lock for what is cached: another thread may be stuck
            return
        with self.cache.key_lock(item.key) as own:
            if self._place_cached(item, view, target):  # the thread we waited for fetched it
                return
            partial = self.cache.partial(item.key) if own else self.cache.private_partial(item.key)
            try:
                self._fetch_checked(item, partial, view, target)
            finally:
                if not own:
                    partial.unlink(missing_ok=True)

    def _place_cached(self, item: RemoteFile, view: Path, target: Path) -> bool:
        """Link `item` from the cache into the view if it is cached and still checks; False otherwise."""
        cached = self.cache.lookup(item.key)
        if cached is None:
            return False
        link_or_copy(cached, target)
        try:
            self._check(item, cached, view)  # a cache is a disk: check again before use
        except InputError:
            target.unlink(missing_ok=True)
            self.cache.discard(item.key)
            return False
        self.stats.cached.append(item.path)
        return True

    def _fetch_checked(self, item: RemoteFile, partial: Path, view: Path, target: Path) -> None:
        with naming_the_file(partial):  # a full cache disk names the file (and so the disk) it could not write
            self._fetch(item, partial)
        link_or_copy(partial, target)
        try:
            self._check(item, partial, view)
        except InputError as exc:
            target.unlink(missing_ok=True)
            self.cache.discard(item.key, partial)
            raise InputError(f"{self.url(item.path)} (fetched, discarded): {exc}") from None
        self.cache.commit(item.key, partial)

    def _fetch(self, item: RemoteFile, partial: Path) -> None:
        """Download `item` into its partial file in the cache: whole, or a checkpoint tensor by tensor."""
        if item.state is None:
            self._download(item, partial)
            return
        try:
            self._fetch_checkpoint(item, partial)
        except Refused as exc:
            self.cache.discard(item.key, partial)
            raise InputError(f"{self.url(item.path)} (fetched, discarded): {exc}") from None

    def _check(self, item: RemoteFile, path: Path, view: Path) -> None:
        """InputError unless the file at `path` (also linked at view/item.path) is what the manifest claims."""
        size = path.stat().st_size
        if size > item.max_bytes or (item.exact and size != item.max_bytes):
            raise InputError(f"{item.path} has {size} bytes, want {'' if item.exact else 'at most '}{item.max_bytes}")
        if item.digest is not None:
            got = _file_digest(path)
            if got != item.digest:
                raise InputError(
                    f"{item.path}: digest {format_digest(got)} is not the manifest's {format_digest(item.digest)}"
                )
        if item.state is not None:
            if item.expected is None:
                raise InputError(f"{item.path}: no claimed state to check it against")
            names = [name for name, _ in item.expected.tensors]
            with open_checkpoint(view, item.state, item.expected, names, item.shapes) as reader:
                reader.verify(item.expected)  # one tensor at a time: a state's memory is never needed here

    def _fetch_checkpoint(self, item: RemoteFile, partial: Path) -> None:
        """Assemble checkpoint `item` in `partial` tensor by tensor, each verified before it is written.

        Resumes after the verified prefix of an earlier partial (its tensors checked again); Refused
        when the file is not the manifest's (bad header, metadata or tensor), InputError when the
        transfer fails (the verified prefix is kept to resume)."""
        if item.state is None or item.expected is None:
            raise InputError(f"{item.path}: no claimed state to check it against")
        plan = CheckpointPieces(item.path, item.state, item.expected.text(), item.expected.tensor_map(), item.shapes)
        layout, have = plan.resume(partial)
        try:
            pieces = self._range_pieces(item.path, lambda: plan.size)
            plan.assemble(partial, layout, have, pieces, self.request_bytes)
            return
        except _RangeIgnored:
            pass
        layout, have = plan.resume(partial)  # the server ignores Range: read the file once from byte 0
        with self.http.get(item.path, {}) as (response, url):
            if response.status_code != 200:
                raise InputError(f"{url}: HTTP {response.status_code} {response.reason_phrase}".rstrip())
            check_length(response, url, item.max_bytes, 0)
            stream = Stream(
                self.http.body(response, url, item.path), 0, lambda at: self.http.report(item.path, at, plan.size)
            )

            def in_order(bounds: list[tuple[int, int]]) -> Generator[bytes, None, None]:
                for start, end in bounds:
                    stream.skip_to(start)
                    data = stream.take(end - start)
                    if len(data) < end - start:
                        raise InputError(f"{url}: the body ended after {stream.position} bytes, within {item.path}")
                    yield data

            plan.assemble(partial, layout, have, in_order, self.request_bytes)

    def span(self, path: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of `path` (a header, before its file is planned): one checked Range request, or,
        from a server that ignores Range, read from its whole reply up to `end` (the rest is not read).
        InputError, one line, when the file is shorter or the reply is not those bytes."""
        try:
            (data,) = self._range_pieces(path, lambda: None)([(start, end)])
            return data
        except _RangeIgnored:
            pass
        except Refused as exc:
            raise InputError(f"{self.url(path)}: {exc}") from None
        with self.http.get(path, {}) as (response, url):
            if response.status_code != 200:
                raise InputError(f"{url}: HTTP {response.status_code} {response.reason_phrase}".rstrip())
            stream = Stream(self.http.body(response, url, path), 0, lambda at: None)
            stream.skip_to(start)
            data = stream.take(end - start)
        if len(data) < end - start:
            raise InputError(f"{url}: the body ended after {start + len(data)} bytes, within {path}")
        return data

    def _range_pieces(self, path: str, total: Callable[[], int | None]) -> Pieces:
        """pieces(bounds): the bytes of each [start, end) of `bounds` (consecutive) of `path`, from one
        Range request for all of them (a checked 206 reply); progress is reported against `total()`."""

        def pieces(bounds: list[tuple[int, int]]) -> Generator[bytes, None, None]:
            start, end = bounds[0][0], bounds[-1][1]
            if end <= start:
                yield from (b"" for _ in bounds)
                return
            asked = f"the {end - start} bytes asked for ({start}-{end - 1})"
            with self.http.get(path, {"Range": f"bytes={start}-{end - 1}"}) as (response, url):
                if response.status_code == 200:
                    raise _RangeIgnored
                if response.status_code != 206:
                    raise InputError(f"{url}: HTTP {response.status_code} {response.reason_phrase}".rstrip())
                check_range_reply(response, url, start, end)
                body = self.http.body(response, url, path, start)
                stream = Stream(body, start, lambda at: self.http.report(path, at, total()))
                for a, b in bounds:
                    data = stream.take(b - a)
                    if len(data) < b - a:
                        raise InputError(f"{url}: the body ended after {stream.position - start} of {asked}")
                    yield data
                if stream.take(1):
                    raise Refused(f"the server sent more than {asked}")

        return pieces

    def _download(self, item: RemoteFile, partial: Path) -> None:
        """Fetch `item` into `partial`, resuming what is there with a Range request; the partial is
        kept when the transfer breaks off (to resume), removed when the server sends too much."""
        have = partial.stat().st_size if partial.is_file() and not partial.is_symlink() else 0
        if have > item.max_bytes or (have == 0 and partial.exists()) or partial.is_symlink():
            partial.unlink(missing_ok=True)
            have = 0
        headers = {"Range": f"bytes={have}-"} if have else {}
        with self.http.get(item.path, headers) as (response, url):
            if response.status_code == 416 and have:  # the partial was complete; the check decides
                return
            if response.status_code == 206:
                check_content_range(response, url, have, item.max_bytes)
            elif response.status_code == 200:
                have = 0  # the server ignored Range (or none was sent): the body is the whole file
            else:
                raise InputError(f"{url}: HTTP {response.status_code} {response.reason_phrase}".rstrip())
            check_length(response, url, item.max_bytes, have)
            total = item.max_bytes if item.exact else None
            self.http.report(item.path, have, total)
            with open(partial, "ab" if have else "wb") as out:
                for chunk in self.http.body(response, url, item.path, have):
                    if have + len(chunk) > item.max_bytes:
                        out.close()
                        partial.unlink(missing_ok=True)
                        raise InputError(f"{url} sent more than the {item.max_bytes} bytes allowed for {item.path}")
                    out.write(chunk)
                    have += len(chunk)
                    self.http.report(item.path, have, total)
                out.flush()
                os.fsync(out.fileno())
        if item.exact and have < item.max_bytes:
            raise InputError(
                f"{url}: the body ended after {have} of {item.max_bytes} bytes (kept to resume with a Range request)"
            )


class _RangeIgnored(Exception):
    """The server answered a Range request with the whole file (200)."""


def _file_digest(path: Path) -> bytes:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            hasher.update(chunk)
    return hasher.digest()
