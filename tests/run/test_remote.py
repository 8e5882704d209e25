"""Remote runs: fetched over HTTP from a real server on loopback, only what the steps need, each file
verified before use, cached by digest, resumed with Range requests; every lie of the server is one
line of InputError and leaves nothing corrupt in the cache."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from p2paudit.audit.remote_view import open_partial_run
from p2paudit.audit.replay import open_run, parse_step_range, verify_range
from p2paudit.cli import cli
from p2paudit.engine import memory
from p2paudit.engine.config import train_config
from p2paudit.engine.schedule import window_starts
from p2paudit.engine.state import state_names, state_shapes
from p2paudit.errors import EXIT_USAGE, InputError
from p2paudit.identity import identity_from_seed
from p2paudit.run.cache import PARTIAL_SUFFIX, BlobCache
from p2paudit.run.checkpoint import checkpoint_bound, checkpoint_path
from p2paudit.run.checkpoint_layout import TensorSpan, header_length, parse_layout
from p2paudit.run.data_dir import import_tokens
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE, read_manifest
from p2paudit.run.publisher import TrainPlan, publish_run
from p2paudit.run.remote import REQUEST_BYTES, RemoteRun
from p2paudit.run.shards import SHARD_TOKENS, load_token_subset, load_tokens
from p2paudit.run.step_shards import replay_memory, shards_for_range
from tests.range_server import STALL_SECONDS, serve_run

PUBLISHER = identity_from_seed(b"\x5a" * 32)
CLIENT_TIMEOUT = 0.5
WIDE_SHARDS = 40


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> Path:
    """tiny, 4 steps, checkpoints at states 0, 2, 4 (reference backend)."""
    run_dir = tmp_path_factory.mktemp("remote") / "run"
    publish_run(TrainPlan(run_dir, "tiny", steps=4, ckpt_every=2, backend="cpu"), PUBLISHER)
    return run_dir


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Path:
    """tiny on WIDE_SHARDS shards of token ids, two windows per step (one micro-batch of 2), 3 steps,
    every state checkpointed: a step reads at most 4 of the shards."""
    root = tmp_path_factory.mktemp("wide")
    ids = np.random.default_rng(9).integers(0, 256, WIDE_SHARDS * SHARD_TOKENS - 1000, dtype=np.uint16)
    np.save(root / "ids.npy", ids)
    import_tokens(root / "ids.npy", 256, root / "data")
    cfg = dataclasses.replace(train_config("tiny", micro_batches=1, steps=3), batch_size=2)
    plan = TrainPlan(root / "run", "tiny", steps=3, micro_batches=1, ckpt_every=1, backend="cpu")
    publish_run(plan, PUBLISHER, config=cfg, data_dir=root / "data")
    return root / "run"


@pytest.fixture
def server(published):
    """(base URL of the run, Served) on 127.0.0.1; stopped at the end of the test."""
    with serve_run(published) as pair:
        yield pair


def _size(run: Path, path: str) -> int:
    return (run / path).stat().st_size


def _shards(run: Path) -> list[str]:
    return [s.path for s in read_manifest(run).data.shards]


def _needed_shards(run: Path, first: int, last: int) -> list[str]:
    """The shard files holding a window of steps c..last (c the nearest checkpoint <= first), from
    schedule.window_starts directly."""
    manifest = read_manifest(run)
    cfg, data = manifest.config, manifest.data
    indices = set()
    for n in range(manifest.nearest_checkpoint(first), last + 1):
        for start in window_starts(data.data_key, cfg, n, data.tokens).ravel().tolist():
            indices |= {start // SHARD_TOKENS, (start + cfg.model.seq_len) // SHARD_TOKENS}
    return [data.shards[i].path for i in sorted(indices)]


def _state_key(run: Path, state: int) -> str:
    return f"state-{read_manifest(run).state_digest(state).digest.hex()}"


def _layout(run: Path, state: int) -> list[TensorSpan]:
    """The tensors of the published checkpoint of `state`, in file order."""
    blob = (run / checkpoint_path(state)).read_bytes()
    shapes = state_shapes(read_manifest(run).config)
    n = header_length(blob[:8], len(shapes), "test")
    layout = parse_layout(blob[8 : 8 + n], shapes, "test")
    return sorted(layout.tensors.values(), key=lambda s: s.start)


def _fetch(
    base: str, cache: BlobCache, first: int | None, last: int | None, timeout: float = 10.0, request_bytes: int = 0
) -> RemoteRun:
    """Fetch what steps first..last need into `cache` (the view is made and removed); the finished RemoteRun."""
    url = base + ("" if base.endswith("/loop") else "/run/")
    with (
        RemoteRun(url, cache, read_timeout=timeout, request_bytes=request_bytes or REQUEST_BYTES) as remote,
        remote.local_view(first, last) as view,
    ):
        assert (view / MANIFEST_FILE).is_file()
    return remote


def _assert_cache_clean(cache: BlobCache, run: Path) -> None:
    """Every file under a final name in the cache is byte for byte a genuine file of the run, and
    every partial download a prefix of one."""
    manifest = read_manifest(run)
    genuine = {f"shard-{s.digest.hex()}": (run / s.path).read_bytes() for s in manifest.data.shards}
    for c in manifest.checkpoints:
        genuine[f"state-{manifest.state_digest(c).digest.hex()}"] = (run / checkpoint_path(c)).read_bytes()
    for path in cache.blobs.iterdir():
        if path.name.endswith(PARTIAL_SUFFIX):
            assert genuine[path.name.removesuffix(PARTIAL_SUFFIX)].startswith(path.read_bytes()), path.name
        else:
            assert path.read_bytes() == genuine[path.name], path.name


def _audits(report):
    return [{k: v for k, v in a.to_dict().items() if k != "seconds"} for a in report.audits]


@pytest.mark.slow
def test_remote_replay_matches_local_and_fetches_only_what_the_steps_need(published, server, tmp_path):
    base, served = server
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with RemoteRun(base + "/run", cache) as remote:
        steps = parse_step_range("2-3", remote.manifest.num_steps)
        with remote.local_view(steps.first, steps.last) as view:
            remote_report = verify_range(open_partial_run(view, "2-3"), steps, "reference", diagnose=False)
    local_report = verify_range(open_run(published), steps, "reference", diagnose=False)
    assert remote_report.all_match and len(remote_report.audits) == 2
    assert _audits(remote_report) == _audits(local_report)

    shards = _needed_shards(published, 2, 3)
    needed = [MANIFEST_FILE, SIGNATURE_FILE, *shards, checkpoint_path(2), checkpoint_path(4)]
    assert served.paths() == set(needed)  # not checkpoint 0, not the unused shards
    assert served.sent() == sum(_size(published, p) for p in needed) == remote.stats.received_bytes
    data_start, size = _layout(published, 2)[0].start, _size(published, checkpoint_path(2))
    # The header's length, the header, then the tensors (1.4 MB: one request of at most REQUEST_BYTES).
    assert served.ranges(checkpoint_path(2)) == [
        "bytes=0-7",
        f"bytes=8-{data_start - 1}",
        f"bytes={data_start}-{size - 1}",
    ]
    assert remote.stats.cached == []
    print(f"steps 2-3: {served.sent()} bytes sent for {len(needed)} files")

    served.log.clear()
    again = _fetch(base, cache, 2, 3)
    assert served.paths() == {MANIFEST_FILE, SIGNATURE_FILE}  # every other file from the cache
    assert served.sent() == _size(published, MANIFEST_FILE) + _size(published, SIGNATURE_FILE)
    assert sorted(again.stats.cached) == sorted(needed[2:])
    _assert_cache_clean(cache, published)
    assert list(cache.views.iterdir()) == []  # the view is gone with its command


@pytest.mark.slow
def test_cli_verifies_a_url_and_exits_0(published, server, tmp_path):
    base, served = server
    result = CliRunner().invoke(
        cli,
        ["verify-range", "3", "--run", base + "/run/", "--backend", "reference", "--cache-dir", str(tmp_path / "c")],
        env={"P2PAUDIT_HOME": str(tmp_path / "home")},
    )
    assert result.exit_code == 0, result.output
    assert "1 check(s)" in result.output and "1 match" in result.output
    assert checkpoint_path(0) not in served.paths() and checkpoint_path(4) in served.paths()


def test_a_url_replays_streaming_with_the_in_memory_audits(published, server, tmp_path):
    base, _ = server
    docs = {}
    for mode in ("in-memory", "streaming"):
        args = ["verify-range", "2-3", "--run", base + "/run/", "--backend", "reference", "--json"]
        args += ["--cache-dir", str(tmp_path / "c"), "--replay", mode, "--scratch-dir", str(tmp_path / "s")]
        result = CliRunner().invoke(cli, args, env={"P2PAUDIT_HOME": str(tmp_path / "home")})
        assert result.exit_code == 0, result.output
        docs[mode] = json.loads(result.stdout)
    assert docs["streaming"]["summary"]["replay"] == "streaming"
    assert [dict(a, seconds=0) for a in docs["streaming"]["audits"]] == [
        dict(a, seconds=0) for a in docs["in-memory"]["audits"]
    ]
    assert list((tmp_path / "s").iterdir()) == []


@pytest.mark.parametrize("victim", ["shard", "checkpoint"])
def test_wrong_bytes_are_refused_in_one_line_and_never_cached(published, server, tmp_path, victim):
    base, served = server
    path = _needed_shards(published, 2, 3)[-1] if victim == "shard" else checkpoint_path(2)
    served.behaviors[path] = "wrong"
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with pytest.raises(InputError) as caught:
        _fetch(base, cache, 2, 3)
    message = str(caught.value)
    assert "\n" not in message and path in message and "discarded" in message
    assert not [p for p in cache.blobs.iterdir() if p.name.endswith(PARTIAL_SUFFIX)]
    _assert_cache_clean(cache, published)

    result = CliRunner().invoke(
        cli, ["verify-range", "2-3", "--run", base + "/run", "--cache-dir", str(tmp_path / "cache")]
    )
    assert result.exit_code == EXIT_USAGE
    assert path in result.output.strip().splitlines()[-1]
    _assert_cache_clean(cache, published)


def test_a_truncated_shard_is_kept_as_partial_and_resumed_with_a_range_request(published, server, tmp_path):
    base, served = server
    path = _needed_shards(published, 2, 3)[-1]
    served.behaviors[path] = "truncate"
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with pytest.raises(InputError, match="broke off") as caught:
        _fetch(base, cache, 2, 3)
    assert "\n" not in str(caught.value)
    partials = [p for p in cache.blobs.iterdir() if p.name.endswith(PARTIAL_SUFFIX)]
    assert len(partials) == 1
    kept = partials[0].stat().st_size
    size = _size(published, path)
    assert 0 < kept < size
    _assert_cache_clean(cache, published)

    del served.behaviors[path]
    served.log.clear()
    _fetch(base, cache, 2, 3)
    resumed = [entry for entry in served.log if entry[0] == path]
    assert resumed == [(path, f"bytes={kept}-", 206, size - kept)]
    assert not [p for p in cache.blobs.iterdir() if p.name.endswith(PARTIAL_SUFFIX)]
    _assert_cache_clean(cache, published)
    assert len(list(cache.blobs.glob("state-*"))) == 2
    assert len(list(cache.blobs.glob("shard-*"))) == len(_needed_shards(published, 2, 3))


def test_a_server_that_ignores_range_is_read_again_from_byte_0(published, server, tmp_path):
    base, served = server
    path = _shards(published)[0]
    manifest = read_manifest(published)
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    key = f"shard-{manifest.data.shards[0].digest.hex()}"
    cache.blobs.mkdir(parents=True)
    cache.partial(key).write_bytes(b"\xff" * 100)  # not even a prefix of the file: must be thrown away
    served.behaviors[path] = "ignore-range"
    _fetch(base, cache, None, None)
    assert [e for e in served.log if e[0] == path] == [(path, "bytes=100-", 200, _size(published, path))]
    assert cache.final(key).read_bytes() == (published / path).read_bytes()
    assert not cache.partial(key).exists()


def test_same_scheme_redirects_are_followed_a_bounded_number_of_times(published, server, tmp_path):
    base, served = server
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with RemoteRun(base + "/moved/run/", cache) as remote, remote.local_view(None, None) as view:
        assert (view / _shards(published)[0]).is_file()
    assert remote.manifest.run_id == read_manifest(published).run_id
    with pytest.raises(InputError, match="more than 5 redirects"):
        _fetch(base + "/loop", cache, None, None)


def test_a_redirect_to_another_scheme_is_refused(published, server, tmp_path):
    base, served = server
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with pytest.raises(InputError, match="another scheme") as caught:
        with RemoteRun(base + "/toscheme/run/", cache) as remote:
            assert remote.manifest is None  # never reached: the fetch raises
    assert "https://" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.serial  # noticed within 3 s: run alone (tests/conftest.py)
def test_a_stalled_server_times_out_in_one_line_and_nothing_is_cached(published, server, tmp_path):
    base, served = server
    path = checkpoint_path(2)
    served.behaviors[path] = "stall"
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    began = time.monotonic()
    with pytest.raises(InputError, match="timed out") as caught:
        _fetch(base, cache, 2, 3, timeout=CLIENT_TIMEOUT)
    assert time.monotonic() - began < STALL_SECONDS
    assert "\n" not in str(caught.value) and path in str(caught.value)
    assert not list(cache.blobs.glob("state-*[0-9a-f]"))  # no checkpoint under a final name
    _assert_cache_clean(cache, published)


def test_the_cache_stays_under_its_size_evicting_the_least_recently_used(published, server, tmp_path):
    base, served = server
    shards = sum(_size(published, p) for p in _needed_shards(published, 2, 3))
    ckpt = _size(published, checkpoint_path(0))
    cfg = read_manifest(published).config
    bound = checkpoint_bound(state_shapes(cfg), len(state_names(cfg)))  # room made for a missing checkpoint
    # Room for the shards of steps 2-3 and two checkpoints to come, not for a third already there.
    cache = BlobCache(tmp_path / "cache", shards + 2 * bound + ckpt // 2)
    _fetch(base, cache, 0, 0)  # checkpoint 0
    _fetch(base, cache, 2, 3)  # checkpoints 2 and 4: checkpoint 0 is the least recently used
    manifest = read_manifest(published)
    names = {p.name for p in cache.blobs.iterdir()}
    assert f"state-{manifest.state_digest(0).digest.hex()}" not in names
    assert {f"state-{manifest.state_digest(c).digest.hex()}" for c in (2, 4)} <= names
    assert cache.used_bytes() <= cache.max_bytes
    with pytest.raises(InputError, match="--cache-size"):
        _fetch(base, BlobCache(tmp_path / "small", shards), 0, 0)


def test_a_url_that_is_not_http_is_refused(tmp_path):
    with pytest.raises(InputError, match="http:// or https://"):
        RemoteRun("ftp://127.0.0.1/run", BlobCache(tmp_path, 1))


def test_the_cache_key_must_be_a_digest(tmp_path):
    with pytest.raises(InputError, match="KIND-<64 hex>"):
        BlobCache(tmp_path, 1).final("../escape")


def test_digest_of_manifest_from_the_server_is_the_run_id(published, server, tmp_path):
    base, _ = server
    with RemoteRun(base + "/run", BlobCache(tmp_path, 1 << 20)) as remote:
        body = remote.manifest.body_bytes
    assert hashlib.sha256(body).digest() == read_manifest(published).run_id


@pytest.mark.slow
def test_a_one_step_replay_fetches_only_the_shards_its_windows_lie_in(wide, tmp_path):
    needed = _needed_shards(wide, 1, 1)  # step 1 starts at checkpoint 1: its two windows only
    assert len(needed) <= 4 < WIDE_SHARDS
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with serve_run(wide) as (base, served), RemoteRun(base + "/run/", cache) as remote:
        steps = parse_step_range("1", remote.manifest.num_steps)
        with remote.local_view(steps.first, steps.last) as view:
            remote_report = verify_range(open_partial_run(view, "1"), steps, "reference", diagnose=False)
    local_report = verify_range(open_run(wide), steps, "reference", diagnose=False)
    assert remote_report.all_match and _audits(remote_report) == _audits(local_report)  # same batches

    fetched_shards = sorted(p for p in served.paths() if p.startswith("shards/"))
    assert fetched_shards == needed
    files = [MANIFEST_FILE, SIGNATURE_FILE, *needed, checkpoint_path(1), checkpoint_path(2)]
    assert served.paths() == set(files)  # not checkpoints 0 and 3
    assert served.sent() == sum(_size(wide, p) for p in files) == remote.stats.received_bytes
    all_shards = sum(_size(wide, p) for p in _shards(wide))
    whole_run = sum(f.stat().st_size for f in wide.rglob("*") if f.is_file())
    print(
        f"step 1 of a {WIDE_SHARDS}-shard run: {served.sent()} bytes fetched ({len(needed)} shards, "
        f"{served.sent(needed[0]) * len(needed)} shard bytes of {all_shards}); the whole run is {whole_run} bytes"
    )


def test_a_token_subset_holds_the_loaded_shards_and_zeros_elsewhere(wide, tmp_path):
    spec = read_manifest(wide).data
    full = load_tokens(wide, spec)
    part = load_token_subset(wide, spec, [3, 7])
    assert part.dtype == full.dtype and part.size == full.size
    inside = np.zeros(full.size, dtype=bool)
    inside[3 * SHARD_TOKENS : 4 * SHARD_TOKENS] = inside[7 * SHARD_TOKENS : 8 * SHARD_TOKENS] = True
    assert np.array_equal(part[inside], full[inside]) and not part[~inside].any()

    # A view that lacks a shard the steps read is refused by name, never replayed on zeros.
    view = tmp_path / "view"
    for name in (MANIFEST_FILE, SIGNATURE_FILE):
        (view / name).parent.mkdir(parents=True, exist_ok=True)
        (view / name).write_bytes((wide / name).read_bytes())
    needed = _needed_shards(wide, 1, 1)
    for path in needed[1:]:
        (view / path).parent.mkdir(parents=True, exist_ok=True)
        (view / path).write_bytes((wide / path).read_bytes())
    with pytest.raises(InputError, match=needed[0]):
        open_partial_run(view, "1")


@pytest.mark.parametrize("server_kind", ["ranges", "ignores-range"])
def test_a_corrupt_tensor_is_refused_by_name_and_nothing_of_it_is_cached(published, server, tmp_path, server_kind):
    base, served = server
    path = checkpoint_path(2)
    spans = _layout(published, 2)
    victim = spans[len(spans) // 2]

    def corrupt(data: bytes) -> bytes:
        at = victim.start + (victim.end - victim.start) // 2
        return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]

    served.mutate[path] = corrupt
    if server_kind == "ignores-range":
        served.behaviors[path] = "ignore-range"
    cache_dir = tmp_path / "cache"
    result = CliRunner().invoke(
        cli, ["verify-range", "2-3", "--run", base + "/run/", "--backend", "reference", "--cache-dir", str(cache_dir)]
    )
    assert result.exit_code == EXIT_USAGE, result.output
    last = result.output.strip().splitlines()[-1]
    assert f"tensor {victim.name} " in last and f"{base}/run/{path}" in last and "discarded" in last
    cache = BlobCache(cache_dir, 1 << 30)
    assert not cache.final(_state_key(published, 2)).exists()
    assert not cache.partial(_state_key(published, 2)).exists()
    _assert_cache_clean(cache, published)


def test_with_one_tensor_per_request_the_fetch_stops_at_the_bad_tensor(published, server, tmp_path):
    base, served = server
    path = checkpoint_path(2)
    spans = _layout(published, 2)
    victim = spans[len(spans) // 2]
    served.mutate[path] = lambda data: data[: victim.start] + bytes([data[victim.start] ^ 1]) + data[victim.start + 1 :]
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with pytest.raises(InputError, match=f"tensor {victim.name} ") as caught:
        _fetch(base, cache, 2, 3, request_bytes=1)
    assert "\n" not in str(caught.value) and f"{base}/run/{path}" in str(caught.value)
    upto = [s for s in spans if s.start <= victim.start]
    header = ["bytes=0-7", f"bytes=8-{spans[0].start - 1}"]
    assert served.ranges(path) == header + [f"bytes={s.start}-{s.end - 1}" for s in upto]  # nothing after it
    assert served.sent(path) == victim.end
    assert not cache.partial(_state_key(published, 2)).exists()
    _assert_cache_clean(cache, published)


def test_a_dropped_checkpoint_fetch_resumes_at_the_first_tensor_not_yet_verified(published, server, tmp_path):
    base, served = server
    path = checkpoint_path(4)
    size = _size(published, path)
    spans = _layout(published, 4)
    broken = spans[len(spans) // 2]
    served.drop_at[path] = broken.start + (broken.end - broken.start) // 2
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with pytest.raises(InputError, match="broke off") as caught:
        _fetch(base, cache, 2, 3)
    assert "\n" not in str(caught.value) and path in str(caught.value)
    partial = cache.partial(_state_key(published, 4))
    assert partial.read_bytes() == (published / path).read_bytes()[: broken.start]  # verified tensors only
    _assert_cache_clean(cache, published)

    served.log.clear()
    _fetch(base, cache, 2, 3)
    assert served.ranges(path) == [f"bytes={broken.start}-{size - 1}"]  # no header, no verified tensor
    assert served.sent(path) == size - broken.start
    assert cache.final(_state_key(published, 4)).read_bytes() == (published / path).read_bytes()
    assert not partial.exists()
    _assert_cache_clean(cache, published)


def test_a_partial_checkpoint_is_checked_again_before_it_is_resumed(published, server, tmp_path):
    base, served = server
    path = checkpoint_path(4)
    spans = _layout(published, 4)
    served.drop_at[path] = spans[-1].start + 1
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with pytest.raises(InputError, match="broke off"):
        _fetch(base, cache, 2, 3)
    partial = cache.partial(_state_key(published, 4))
    data = bytearray(partial.read_bytes())
    assert len(data) == spans[-1].start
    data[spans[2].start] ^= 0x01  # the disk spoiled the third tensor
    partial.write_bytes(bytes(data))

    served.log.clear()
    _fetch(base, cache, 2, 3)
    assert served.ranges(path) == [f"bytes={spans[2].start}-{spans[-1].end - 1}"]
    assert cache.final(_state_key(published, 4)).read_bytes() == (published / path).read_bytes()


def test_a_server_that_ignores_range_serves_a_checkpoint_whole_each_tensor_verified(published, server, tmp_path):
    base, served = server
    path = checkpoint_path(2)
    served.behaviors[path] = "ignore-range"
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    _fetch(base, cache, 2, 3)
    assert served.ranges(path) == ["bytes=0-7", None]  # refused ranges, then the whole file once
    assert cache.final(_state_key(published, 2)).read_bytes() == (published / path).read_bytes()
    _assert_cache_clean(cache, published)


def test_memory_is_checked_after_the_manifest_before_any_shard_or_checkpoint(published, server, tmp_path, monkeypatch):
    base, served = server
    monkeypatch.setattr(memory, "available_bytes", lambda: 4096)
    args = ["--run", base + "/run/", "--backend", "reference", "--cache-dir", str(tmp_path / "cache")]
    result = CliRunner().invoke(cli, ["verify-range", "2-3", *args])
    assert result.exit_code == EXIT_USAGE, result.output
    last = result.output.strip().splitlines()[-1]
    assert "memory" in last and "4.00 KiB is available" in last and "--ignore-memory-check" in last
    assert served.paths() == {MANIFEST_FILE, SIGNATURE_FILE}  # not one shard or checkpoint

    result = CliRunner().invoke(cli, ["verify-range", "init", *args, "--ignore-memory-check"])
    assert result.exit_code == 0, result.output
    assert set(_shards(published)) <= served.paths()  # init fetches every shard (the data key)


def test_a_reply_to_a_range_request_must_be_the_bytes_asked_for(published, server, tmp_path):
    base, served = server
    path = checkpoint_path(2)
    served.behaviors[path] = "shift-range"
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with pytest.raises(InputError, match="Content-Range") as caught:
        _fetch(base, cache, 2, 3)
    assert "\n" not in str(caught.value) and path in str(caught.value) and "discarded" in str(caught.value)
    assert served.ranges(path) == ["bytes=0-7"]
    assert not cache.partial(_state_key(published, 2)).exists()
    _assert_cache_clean(cache, published)


def test_the_early_memory_check_counts_the_replay_mode(published, server, tmp_path, monkeypatch):
    base, served = server
    manifest = read_manifest(published)
    shards = shards_for_range(manifest, 2, 3)
    streaming, in_memory = replay_memory(manifest, shards, "auto"), replay_memory(manifest, shards, "in-memory")
    assert streaming < in_memory
    monkeypatch.setattr(memory, "available_bytes", lambda: (streaming + in_memory) // 2)
    cache = BlobCache(tmp_path / "cache", 1 << 30)
    with RemoteRun(base + "/run/", cache) as remote:
        with pytest.raises(InputError, match=r"\(in memory\)"), remote.local_view(2, 3, mode="in-memory"):
            pass
        assert served.paths() == {MANIFEST_FILE, SIGNATURE_FILE}
        with remote.local_view(2, 3, mode="auto") as view:  # streaming fits
            assert (view / checkpoint_path(4)).is_file()
