"""A lab run (run.lab_run) on a web server: what replaying some of its steps needs, fetched, checked against
the signed manifest, cached, and laid out as a local lab run directory (run.remote's transport and cache).

Order of trust, as for an engine run: manifest.sig.json first, its key held
against the pinned publishers; manifest.json, its size bounded and its SHA-256
the run id; then its lab signature and every field
(run.lab_run.lab_manifest_from_bytes). Nothing of the run is run by this
module. For steps A..B it places:

- script.py, written from the signed manifest, which holds the script's text
  beside its SHA-256 (both signed; the reader checks that they agree): the
  server's script.py is never fetched;
- the trace file of each step A..B, whole (at most MAX_TRACE_FILE bytes), its
  SHA-256 the manifest's;
- the checkpoint of each state A..B (step n replays from state n; the digest
  of state n+1 is compared with the claim, so that state is not fetched):
  its 8-byte length and JSON header first (two Range requests: the tensors
  must be the claimed state's names, each with a known dtype and a bounded
  shape), which give the file's exact size, so the cache can make room for it
  before any tensor is fetched; then the tensors, each checked against the
  claimed tensor digest (which covers its dtype and shape) before it is
  written (run.remote_checkpoint).

A lab run claims no memory figure: the check made before fetching is a lower
bound, twice the largest state's bytes (the checkpoint loaded, and the
model's and optimiser's own tensors), so a state that cannot fit is refused
before it is fetched.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from p2paudit.durable import naming_the_file
from p2paudit.engine.memory import check_fits
from p2paudit.errors import InputError
from p2paudit.run.checkpoint import checkpoint_path
from p2paudit.run.checkpoint_layout import header_length, parse_layout
from p2paudit.run.lab_format import BATCHES_DIR, SCRIPT_FILE, TRACES_DIR
from p2paudit.run.lab_run import MAX_TRACE_FILE, LabManifest, lab_batch_path, lab_manifest_from_bytes, lab_trace_path
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE
from p2paudit.run.remote import RemoteRun
from p2paudit.run.remote_files import RemoteFile, state_key

STATE_MEMORY_FACTOR = 2  # a replay holds at least the loaded checkpoint and the model's own copy of the state


class RemoteLabRun:
    """The lab run that `remote` (a RemoteRun whose manifest's format is a lab run's) serves: its checked
    manifest, and `local_view(steps)` to fetch and lay out what replaying those steps needs."""

    def __init__(self, remote: RemoteRun) -> None:
        self.remote = remote
        sig, body = remote.signed_body()
        where, sig_where = str(remote.url(MANIFEST_FILE)), str(remote.url(SIGNATURE_FILE))
        self.manifest: LabManifest = lab_manifest_from_bytes(body, sig, where, sig_where)

    @contextmanager
    def local_view(self, steps: range, ignore_memory: bool = False) -> Iterator[Path]:
        """A local lab run directory holding the manifest, the script and the checked trace files, batches
        and checkpoints that steps `steps` replay from (no steps: state 0's rebuild needs the script alone),
        removed on exit (run.lab_run.open_lab_run(view, steps) opens it). InputError (one line) for steps
        outside the run, a state that cannot fit in memory (unless `ignore_memory`), or any file that is
        not the manifest's."""
        m = self.manifest
        if steps and not 0 <= steps[0] <= steps[-1] < m.num_steps:
            where = f"steps {steps[0]}..{steps[-1]}"
            raise InputError(f"{where} are not in the run at {self.remote.base} (it has steps 0..{m.num_steps - 1})")
        checkpoints = [self._checkpoint_file(n) for n in steps]
        if checkpoints and not ignore_memory:
            largest = max(f.max_bytes for f in checkpoints)
            check_fits(
                STATE_MEMORY_FACTOR * largest,
                f"replaying steps {steps[0]}-{steps[-1]} of the lab run at {self.remote.base}",
            )
        traces = [
            RemoteFile(lab_trace_path(n), f"trace-{m.trace_files[n].hex()}", MAX_TRACE_FILE, False, m.trace_files[n])
            for n in steps
        ]
        batches = [
            RemoteFile(
                lab_batch_path(n), f"batch-{m.batches[n].digest.hex()}", m.batches[n].size, False, m.batches[n].digest
            )
            for n in steps
        ]
        with self.remote.cache.view(self.remote.view_name()) as view:
            (view / TRACES_DIR).mkdir()
            (view / BATCHES_DIR).mkdir()
            with naming_the_file(view / SCRIPT_FILE):
                (view / SCRIPT_FILE).write_bytes(m.script_source)
            self.remote.place_files(traces + batches + checkpoints, view)
            yield view

    def _checkpoint_file(self, n: int) -> RemoteFile:
        """The checkpoint of state n as a file to place: its exact size from the cached copy's own header
        when that header parses and gives the copy's length, else from the served header (fetched and
        parsed against the claimed state's tensor names). A cached copy whose header or length is damaged is
        discarded here, so the step is planned from the served header in this attempt (a copy damaged
        within its tensors keeps its size and is discarded and fetched again when it is placed)."""
        expected = self.manifest.state(n)
        path, key = checkpoint_path(n), state_key(expected)
        names = [name for name, _ in expected.tensors]
        size = self._cached_size(key, names)
        if size is None:
            where = str(self.remote.url(path))
            length = header_length(self.remote.span(path, 0, 8), len(names), where)
            size = parse_layout(self.remote.span(path, 8, 8 + length), None, where, names).file_size
        return RemoteFile(path, key, size, True, None, n, expected, None)

    def _cached_size(self, key: str, names: list[str]) -> int | None:
        """The size the cached checkpoint `key`'s header gives, if that is the copy's length; None (the copy
        discarded) when its header does not parse or gives another length; None when nothing is cached."""
        cached = self.remote.cache.lookup(key)
        if cached is None:
            return None
        try:
            with open(cached, "rb") as f:
                length = header_length(f.read(8), len(names), str(cached))
                size = parse_layout(f.read(length), None, str(cached), names).file_size
            if size == cached.stat().st_size:
                return size
        except (OSError, InputError):
            pass
        self.remote.cache.discard(key)
        return None
