"""A full disk names the file it could not write, and `data import` leaves nothing a rerun refuses.

The red team of issue 14: "No space left on device" from `data import` and
from a full remote cache named no file; `data import` onto a full disk left
OUT/shards without data.json, and a rerun was refused. The disks here are real:
a small tmpfs in a private mount namespace (tests.small_disk).
"""

from __future__ import annotations

import functools
import http.server
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from p2paudit.errors import InputError
from p2paudit.identity import identity_from_seed
from p2paudit.run.checkpoint import checkpoint_path
from p2paudit.run.data_dir import DATA_FILE, import_tokens
from p2paudit.run.publisher import TrainPlan, publish_run
from p2paudit.run.shards import SHARD_HEADER_IDS, SHARD_TOKENS
from tests.small_disk import namespace_prefix, on_small_disk

PUBLISHER = identity_from_seed(b"\x61" * 32)
SHARD_FILE_BYTES = SHARD_HEADER_IDS.size + 2 * SHARD_TOKENS  # one full uint16 shard
# Import $1 into $2/out (it fails), keep its stderr and exit code and what it left in $3, then import $4 there.
IMPORT_TWICE = f"""
"{sys.executable}" -m p2paudit data import "$1" "$2/out" --vocab-size 300 2> "$3/first.err"
echo $? > "$3/first.code"
ls -A "$2" > "$3/left.txt"
exec "{sys.executable}" -m p2paudit data import "$4" "$2/out" --vocab-size 300
"""


def _tokens(path: Path, count: int) -> Path:
    (np.arange(count) % 300).astype("<u2").tofile(path)
    return path


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


def test_data_import_onto_a_full_disk_names_the_shard_and_a_rerun_succeeds(tmp_path):
    prefix = namespace_prefix("the full-disk tests")
    big = _tokens(tmp_path / "big.bin", 5 * SHARD_TOKENS)  # 5 shards; the disk holds one
    small = _tokens(tmp_path / "small.bin", 1000)
    mount, out = tmp_path / "disk", tmp_path / "out"
    mount.mkdir()
    out.mkdir()
    size = SHARD_FILE_BYTES + 64 * 1024  # shard 0 fits, shard 1 meets ENOSPC
    done = on_small_disk(prefix, mount, size, IMPORT_TWICE, str(big), str(mount), str(out), str(small))
    first = _last_line((out / "first.err").read_text())
    assert (out / "first.code").read_text().strip() == "2"
    assert first == f"Error: No space left on device ({mount}/out/shards/shard-00001.bin)"
    assert (out / "left.txt").read_text() == ""  # the failed import removed what it wrote
    assert done.returncode == 0, done.stderr
    assert "1000 tokens (uint16, vocab_size 300) in 1 shard(s)" in done.stdout


def test_an_unfinished_import_is_started_again_and_a_stranger_file_refused(tmp_path):
    source = _tokens(tmp_path / "t.bin", SHARD_TOKENS + 10)
    out = tmp_path / "out"
    spec = import_tokens(source, 300, out)
    (out / DATA_FILE).unlink()  # as a kill before data.json was written leaves it
    assert import_tokens(source, 300, out) == spec
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["shard-00000.bin", "shard-00001.bin"]
    (out / DATA_FILE).unlink()
    (out / "shards" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="is not an empty directory"):
        import_tokens(source, 300, out)
    assert (out / "shards" / "notes.txt").read_text() == "mine"


def test_a_failed_import_leaves_an_existing_empty_directory_empty(tmp_path):
    source = tmp_path / "t.bin"
    np.array([1, 2] * SHARD_TOKENS + [300], "<u2").tofile(source)  # shards 0 and 1 are written, then 300 refused
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(InputError, match="is id 300"):
        import_tokens(source, 300, out)
    assert list(out.iterdir()) == []


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def served_run(tmp_path):
    """A tiny run of 1 step on a loopback HTTP server (one that ignores Range: the client reads from byte 0)."""
    root = tmp_path / "www"
    publish_run(TrainPlan(root / "run", "tiny", steps=1, ckpt_every=1, backend="cpu"), PUBLISHER)
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/run", root / "run"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow  # 8 s: publishes a run, then a replay process in a mount namespace (fast tier: -m 'not slow')
def test_a_full_remote_cache_names_the_file_it_could_not_write(served_run, tmp_path):
    prefix = namespace_prefix("the full-disk tests")
    url, run_dir = served_run
    cache = tmp_path / "cache"
    cache.mkdir()
    state_bytes = (run_dir / checkpoint_path(0)).stat().st_size
    script = f'exec "{sys.executable}" -m p2paudit verify-range 0 --run "$1" --cache-dir "$2" --backend reference'
    env = dict(os.environ, P2PAUDIT_HOME=str(tmp_path / "home"))
    done = on_small_disk(prefix, cache, state_bytes // 2, script, url, str(cache), env=env)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("Error: No space left on device (") and f"({cache}/" in line, line
    assert line.endswith(".partial)"), line  # the download in progress, in the cache's blobs/
