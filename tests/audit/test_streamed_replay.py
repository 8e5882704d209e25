"""The streaming replay gives the in-memory replay's audits, bit for bit, holding far less."""

import errno
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kernels import ARITHMETIC_VERSION
from p2paudit.audit.records import ERROR, MISMATCH
from p2paudit.audit.replay import StepRange, open_run, verify_range
from p2paudit.audit.streamed_replay import NO_BISECT, verify_range_streamed
from p2paudit.engine.backends import load_backend
from p2paudit.engine.config import train_config
from p2paudit.engine.state import init_state
from p2paudit.engine.step import train_step
from p2paudit.engine.streaming import MemoryGradStore, streamed_step
from p2paudit.errors import InputError
from p2paudit.run import spill
from p2paudit.run.checkpoint import checkpoint_path, load_checkpoint, save_checkpoint
from p2paudit.run.digest import digest_state
from p2paudit.run.manifest import write_manifest
from p2paudit.run.spill import DiskGradStore


def _same(a, b) -> None:
    """Two RangeReports agree on everything but timings and the trace bisection."""
    assert [replace(x, seconds=0.0) for x in a.audits] == [replace(x, seconds=0.0) for x in b.audits]
    assert [(d.step, d.tensors, d.diffs) for d in a.diagnoses] == [(d.step, d.tensors, d.diffs) for d in b.diagnoses]


def _body(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_bytes())


@pytest.mark.slow  # 22 s for its cases (fast tier: pytest -m 'not slow')
@pytest.mark.parametrize("spilled", [True, False])
@pytest.mark.parametrize("first, last", [(0, 3), (1, 3), (3, 3)])
def test_streamed_replay_equals_the_in_memory_replay(traced_run, tmp_path, first, last, spilled):
    view = open_run(traced_run)
    steps = StepRange(first == 0, first, last)
    memory = verify_range(view, steps, "cpu", diagnose=False)
    seen = []
    streamed = verify_range_streamed(view, steps, "cpu", tmp_path / "scratch", spill=spilled, on_audit=seen.append)
    assert streamed.all_match and memory.all_match
    _same(streamed, memory)
    assert seen == list(streamed.audits)
    assert list((tmp_path / "scratch").iterdir()) == []  # the scratch files are gone


@pytest.mark.slow  # 6 s (fast tier: pytest -m 'not slow')
def test_a_forged_claim_is_explained_tensor_by_tensor(traced_copy, tmp_path, audit_publisher):
    view = open_run(traced_copy)
    true_state = load_checkpoint(traced_copy, 2, view.manifest.state_digest(2), list(view.names))
    wte = true_state["params/wte"].copy()
    wte[3, 5] = np.nextafter(wte[3, 5], np.float32(np.inf))
    m = true_state["opt/m/h.0.ln1"].copy()
    m[:7] = np.float32(0.5)
    forged = dict(true_state, **{"params/wte": wte, "opt/m/h.0.ln1": m})
    save_checkpoint(traced_copy, 2, forged, digest_state(forged))
    body = _body(traced_copy)
    body["steps"][1]["output"] = digest_state(forged).to_dict()
    write_manifest(traced_copy, body, audit_publisher)
    view = open_run(traced_copy)
    memory = verify_range(view, StepRange(False, 1, 3), "cpu", against="reference")
    streamed = verify_range_streamed(view, StepRange(False, 1, 3), "cpu", tmp_path / "scratch")
    # step 2 runs from the forged (published) state 2, so it cannot give the claimed state 3 either
    assert [a.verdict for a in streamed.audits] == [MISMATCH, MISMATCH, ERROR]
    _same(streamed, memory)
    diagnosis = streamed.diagnoses[0]
    assert diagnosis.tensors == ("opt/m/h.0.ln1", "params/wte")
    assert [(d.name, d.differing) for d in diagnosis.diffs] == [("opt/m/h.0.ln1", 7), ("params/wte", 1)]
    assert diagnosis.conclusion == NO_BISECT and diagnosis.divergences == ()


def test_a_loss_only_forgery_and_a_bad_checkpoint_are_caught_as_in_memory(traced_copy, tmp_path, audit_publisher):
    body = _body(traced_copy)
    body["steps"][2]["loss"] = body["steps"][2]["loss"] * 0.5
    body["loss_curve"][2] = body["steps"][2]["loss"]
    write_manifest(traced_copy, body, audit_publisher)
    view = open_run(traced_copy)
    streamed = verify_range_streamed(view, StepRange(False, 2, 2), "cpu", tmp_path / "scratch")
    _same(streamed, verify_range(view, StepRange(False, 2, 2), "cpu", diagnose=False))
    assert streamed.audits[0].findings == ("loss",)
    target = traced_copy / checkpoint_path(4)
    blob = bytearray(target.read_bytes())
    blob[-3] ^= 1  # one bit of the last tensor of the state after step 3
    target.write_bytes(bytes(blob))
    with pytest.raises(InputError, match="state digest .* is not the manifest's"):
        verify_range_streamed(open_run(traced_copy), StepRange(False, 2, 3), "cpu", tmp_path / "scratch")


def test_a_full_scratch_disk_is_one_line_and_leaves_nothing(traced_run, tmp_path, monkeypatch):
    def full(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(spill.os, "pwrite", full)
    with pytest.raises(InputError, match=r"scratch directory .*: cannot keep a partial gradient sum .*No space left"):
        verify_range_streamed(open_run(traced_run), StepRange(False, 1, 1), "cpu", tmp_path / "scratch")
    assert list((tmp_path / "scratch").iterdir()) == []


@pytest.mark.slow  # 109 s for its 3 cases (fast tier: pytest -m 'not slow')
@pytest.mark.parametrize("micro_batches", [1, 2, 8])
def test_streamed_step_is_train_step_bit_for_bit(tmp_path, micro_batches):
    """On `small` with moments already non-zero, spilled to disk and kept in memory."""
    cfg = train_config("small", micro_batches=micro_batches)
    be = load_backend("cpu", ARITHMETIC_VERSION)
    rng = np.random.default_rng(micro_batches)
    shape = (micro_batches, cfg.batch_size, cfg.model.seq_len + 1)
    batch = rng.integers(0, cfg.model.vocab_size, size=shape).astype(np.int64)
    state = train_step(init_state(cfg), batch, cfg, be).state
    want = train_step(state, batch, cfg, be)
    params = {k: v for k, v in state.items() if k.startswith("params/")}
    disk = DiskGradStore(tmp_path)
    for store in (disk, MemoryGradStore()):
        got: dict[str, np.ndarray] = {}
        loss = streamed_step(
            params,
            int(state["step"]),
            lambda n: (state["opt/m/" + n], state["opt/v/" + n]),
            batch,
            got.__setitem__,
            cfg,
            be,
            store,
        )
        assert digest_state(got) == digest_state(want.state)
        assert loss.tobytes() == want.loss.tobytes()
    assert (disk.bytes_written > 0) == (micro_batches > 1)  # partial sums waited on disk


def test_planned_replay_streams_only_when_in_memory_would_not_fit(traced_run, tmp_path, monkeypatch):
    import p2paudit.audit.streamed_replay as streamed_replay
    from p2paudit.engine.memory import estimate_memory
    from p2paudit.node.assign.auditor import AuditPolicy, replay_step

    view = open_run(traced_run)
    estimate = estimate_memory(view.cfg, view.manifest.data.tokens, view.manifest.data.token_bytes)
    steps = StepRange(False, 2, 3)
    want = verify_range(view, steps, "cpu", diagnose=False)
    for have, mode in ((None, "in-memory"), (estimate.replay * 2, "in-memory"), (estimate.replay - 1, "streaming")):
        monkeypatch.setattr(streamed_replay, "available_bytes", lambda have=have: have)
        got = streamed_replay.verify_range_planned(view, steps, "cpu", "auto", tmp_path / "s", diagnose=False)
        assert got.replay == mode
        _same(got, want)
        # the daemon's auditor takes the same road when it has a scratch directory
        (audit,) = replay_step(view, 3, "cpu", AuditPolicy(scratch_dir=tmp_path / "s"))
        assert replace(audit, seconds=0.0) == replace(want.audits[1], seconds=0.0)


def test_a_checkpoint_changed_after_it_was_verified_is_never_used(traced_copy, tmp_path, monkeypatch):
    from p2paudit.run.checkpoint import CheckpointReader

    verify = CheckpointReader.verify

    def verify_then_tamper(reader, expected):
        verify(reader, expected)
        span = reader.layout.tensors["params/wte"]
        with open(reader.path, "r+b") as handle:  # the same length: only the digest can tell
            handle.seek(span.start)
            byte = handle.read(1)
            handle.seek(span.start)
            handle.write(bytes([byte[0] ^ 1]))

    monkeypatch.setattr(CheckpointReader, "verify", verify_then_tamper)
    with pytest.raises(InputError, match="tensor params/wte is not the one verified"):
        verify_range_streamed(open_run(traced_copy), StepRange(False, 2, 2), "cpu", tmp_path / "scratch")
