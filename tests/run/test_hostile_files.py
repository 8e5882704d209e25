"""A run directory cannot hurt the verifier: no links, FIFOs, devices or directories where files belong.

Every file a run names (manifest, signature, a shard, a checkpoint, a trace,
the publisher's progress file) is replaced by a symlink to /dev/zero, a FIFO,
a symlink to a genuine copy outside the run, and a directory; each read must
end quickly in one InputError line. A hang fails through pytest-timeout
instead of hanging CI.
"""

import os
import shutil
from pathlib import Path

import pytest

from p2paudit.engine.config import TrainConfig
from p2paudit.engine.state import state_names, state_shapes
from p2paudit.errors import InputError
from p2paudit.run.checkpoint import checkpoint_path, load_checkpoint
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE, read_manifest
from p2paudit.run.shards import load_tokens, shard_path
from p2paudit.run.traces import load_trace, trace_path

pytestmark = pytest.mark.timeout(60)

FILES = [MANIFEST_FILE, SIGNATURE_FILE, shard_path(1), checkpoint_path(1), trace_path(1)]
HOSTILE = ["dev-zero", "fifo", "link-out", "directory"]


def _read_everything(run_dir: Path) -> None:
    manifest = read_manifest(run_dir)
    load_tokens(run_dir, manifest.data)
    cfg = TrainConfig.from_dict(manifest.config_dict)
    for c in manifest.checkpoints:
        load_checkpoint(run_dir, c, manifest.state_digest(c), state_names(cfg), state_shapes(cfg))
    for step in manifest.steps:
        load_trace(run_dir, step.step, step.trace)


def _make_hostile(target: Path, kind: str, outside: Path) -> None:
    kept = outside / ("genuine-" + target.name)
    shutil.copyfile(target, kept)
    target.unlink()
    if kind == "dev-zero":
        target.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "link-out":
        target.symlink_to(kept)  # the genuine bytes, but outside the run: refused all the same
    else:
        target.mkdir()


def test_the_untouched_traced_run_reads_back(traced_copy):
    _read_everything(traced_copy)


@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("relative", FILES)
def test_a_hostile_file_is_one_line_of_input_error(traced_copy, tmp_path, relative, kind):
    target = traced_copy / relative
    _make_hostile(target, kind, tmp_path)
    with pytest.raises(InputError) as info:
        _read_everything(traced_copy)
    message = str(info.value)
    assert str(target) in message and "\n" not in message, message
    assert any(word in message for word in ("symbolic link", "FIFO", "directory")), message


@pytest.mark.parametrize("sub", ["shards", "checkpoints", "traces"])
def test_a_linked_subdirectory_is_refused(traced_copy, tmp_path, sub):
    moved = tmp_path / ("moved-" + sub)
    shutil.move(traced_copy / sub, moved)
    (traced_copy / sub).symlink_to(moved)  # genuine files, reached through a link out of the run
    with pytest.raises(InputError, match=f"{traced_copy / sub} is a symbolic link"):
        _read_everything(traced_copy)


def test_a_checkpoint_larger_than_its_tensors_is_refused_before_reading(traced_copy):
    target = traced_copy / checkpoint_path(1)
    with open(target, "ab") as handle:
        handle.truncate(target.stat().st_size + 10 * 1024 * 1024)  # sparse: costs no disk
    with pytest.raises(InputError, match="more than the .* allowed"):
        _read_everything(traced_copy)


def test_a_checkpoint_with_the_wrong_shape_is_refused_before_reading(traced_copy):
    import numpy as np

    from p2paudit.run.checkpoint import save_checkpoint

    manifest = read_manifest(traced_copy)
    cfg = TrainConfig.from_dict(manifest.config_dict)
    state = load_checkpoint(traced_copy, 1, manifest.state_digest(1), state_names(cfg))
    state["params/wpe"] = np.zeros((3, 3), np.float32)
    save_checkpoint(traced_copy, 1, state, manifest.state_digest(1))
    with pytest.raises(InputError, match=r"tensor params/wpe is F32 \[3, 3\], want F32 \[64, 64\]"):
        load_checkpoint(traced_copy, 1, manifest.state_digest(1), state_names(cfg), state_shapes(cfg))


def test_a_path_leaving_the_run_is_refused(traced_copy):
    from p2paudit.run.storage import read_file

    with pytest.raises(InputError, match="is outside"):
        read_file(traced_copy.parent / "elsewhere", "shard", 100, traced_copy)
    with pytest.raises(InputError, match="is not a file name below"):
        read_file(traced_copy / "shards" / ".." / MANIFEST_FILE, "manifest", 100, traced_copy)


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_progress_file_is_refused(tmp_path, kind):
    from p2paudit.identity import identity_from_seed
    from p2paudit.run.publisher import publish_run
    from p2paudit.run.training import PROGRESS_FILE, TrainPlan

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / PROGRESS_FILE).write_text("{}")
    _make_hostile(run_dir / PROGRESS_FILE, kind, tmp_path)
    with pytest.raises(InputError, match=f"{run_dir / PROGRESS_FILE} is damaged") as info:
        publish_run(TrainPlan(run_dir, steps=1, backend="reference"), identity_from_seed(bytes(32)))
    assert "\n" not in str(info.value)
