"""Replaying published steps: every digest reproduced, and a corrupted claim diagnosed down to an operation."""

import json
from pathlib import Path

import numpy as np
import pytest

from p2paudit.audit.records import ERROR, MATCH, MISMATCH
from p2paudit.audit.replay import StepRange, open_run, parse_step_range, verify_range
from p2paudit.engine.backends import single_process_step
from p2paudit.engine.schedule import batch_for_step
from p2paudit.errors import InputError
from p2paudit.run.checkpoint import load_checkpoint, save_checkpoint
from p2paudit.run.digest import digest_bytes, digest_state, format_digest
from p2paudit.run.manifest import write_manifest
from p2paudit.run.traces import encode_trace, load_trace, trace_path

WTE_INDEX = (3, 5)


def _steps(a: int, b: int) -> StepRange:
    """Steps a..b without the initial-state check (tested on its own in test_what_a_match_proves)."""
    return StepRange(False, a, b)


def _body(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_bytes())


def _bumped(state: dict) -> dict:
    """The state with one element of params/wte one ulp larger."""
    wte = state["params/wte"].copy()
    wte[WTE_INDEX] = np.nextafter(wte[WTE_INDEX], np.float32(np.inf))
    return dict(state, **{"params/wte": wte})


def test_every_step_reproduces_its_digest(traced_run):
    view = open_run(traced_run)
    seen = []
    report = verify_range(view, _steps(0, 3), "reference", on_audit=seen.append)
    assert report.all_match and not report.diagnoses
    assert [a.step for a in report.audits] == [0, 1, 2, 3] and seen == list(report.audits)
    assert all(a.findings == () for a in report.audits)
    for audit, record in zip(report.audits, view.manifest.steps):
        assert audit.observed_digest == audit.claimed_digest == record.output.digest
        assert audit.observed_data == audit.claimed_data == record.data_digest
        assert audit.observed_loss == audit.claimed_loss == record.loss
        assert audit.input_digest == view.manifest.state_digest(audit.step).digest
        assert audit.run_id == view.manifest.run_id
    record = report.audits[2].to_dict()
    assert record["verdict"] == MATCH and record["claimed_digest"].startswith("sha256:")


@pytest.mark.slow  # 2 s (fast tier: pytest -m 'not slow')
def test_a_range_inside_the_run_starts_at_the_nearest_checkpoint(traced_run):
    report = verify_range(open_run(traced_run), _steps(3, 3), "reference")
    assert [(a.step, a.verdict) for a in report.audits] == [(3, MATCH)]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("0-3", (True, 0, 3)),
        ("2", (False, 2, 2)),
        (" 1 - 2 ", (False, 1, 2)),
        ("init", (True, None, None)),
        ("0", (True, 0, 0)),
    ],
)
def test_parse_step_range(text, expected):
    assert parse_step_range(text, 4) == StepRange(*expected)


@pytest.mark.parametrize(
    "text, message",
    [
        ("3-1", "runs backwards"),
        ("0-4", "step 4 is outside the run: it has steps 0-3"),
        ("a-b", "is not 'init', 'A-B'"),
        ("-1", "is not 'init', 'A-B'"),
        ("1-2-3", "is not 'init', 'A-B'"),
        ("", "is not 'init', 'A-B'"),
        ("\u0663", "ASCII decimal"),
        ("1-\u0662", "ASCII decimal"),
        ("\uff11", "ASCII decimal"),  # Arabic-Indic, fullwidth
        ("9" * 5000, "5000 characters"),
        ("1" * 19, "ASCII decimal"),
        ("INIT", "is not 'init'"),
    ],
)
def test_bad_step_ranges(text, message):
    with pytest.raises(InputError, match=message):
        parse_step_range(text, 4)


def _corrupt_checkpointed_claim(run_dir: Path, publisher, step: int) -> None:
    """Claim, for `step`, a state one ulp away from the true one, in the manifest and the checkpoint."""
    view = open_run(run_dir)
    true_state = load_checkpoint(run_dir, step + 1, view.manifest.state_digest(step + 1), list(view.names))
    forged = _bumped(true_state)
    forged_digest = digest_state(forged)
    save_checkpoint(run_dir, step + 1, forged, forged_digest)
    body = _body(run_dir)
    body["steps"][step]["output"] = forged_digest.to_dict()
    write_manifest(run_dir, body, publisher)


@pytest.mark.slow  # 6 s (fast tier: pytest -m 'not slow')
def test_a_forged_claim_names_tensor_count_ulps_and_blames_the_claim(traced_copy, audit_publisher):
    _corrupt_checkpointed_claim(traced_copy, audit_publisher, step=1)
    report = verify_range(open_run(traced_copy), _steps(1, 1), "reference", against="cpu")
    assert [a.verdict for a in report.audits] == [MISMATCH]
    (diagnosis,) = report.diagnoses
    assert diagnosis.tensors == ("params/wte",)
    (diff,) = diagnosis.diffs
    assert (diff.name, diff.differing, diff.max_ulps) == ("params/wte", 1, 1)
    backends, published = diagnosis.divergences
    assert backends.index is None and published.index is None  # every computation agrees
    assert "fault is in the claim, not the verifier" in diagnosis.conclusion


@pytest.mark.slow  # 6 s (fast tier: pytest -m 'not slow')
def test_bisect_against_a_published_trace_names_the_operation(traced_copy, audit_publisher):
    _corrupt_checkpointed_claim(traced_copy, audit_publisher, step=1)
    body = _body(traced_copy)
    # The forged claim comes with a forged trace whose wte update departs, as a
    # publisher with a faulty kernel would publish it.
    ops = load_trace(traced_copy, 1, bytes.fromhex(body["steps"][1]["trace"][7:]))
    index = [name for name, _ in ops].index("update/wte/p")
    ops[index] = (ops[index][0], bytes(32))
    blob = encode_trace(1, ops)
    (traced_copy / trace_path(1)).write_bytes(blob)
    body["steps"][1]["trace"] = format_digest(digest_bytes(blob))
    write_manifest(traced_copy, body, audit_publisher)
    (diagnosis,) = verify_range(open_run(traced_copy), _steps(1, 1), "reference", against="cpu").diagnoses
    published = diagnosis.divergences[1]
    assert (published.index, published.op_name) == (index, "update/wte/p")
    assert "published trace departs at operation update/wte/p" in diagnosis.conclusion
    assert any("first depart at operation" in line for line in diagnosis.lines())


@pytest.mark.slow  # 4.5 s (fast tier: pytest -m 'not slow')
def test_after_a_mismatch_without_checkpoint_later_steps_are_errors_until_reanchored(traced_copy, audit_publisher):
    view = open_run(traced_copy)
    state0 = load_checkpoint(traced_copy, 0, view.manifest.state_digest(0), list(view.names))
    batch = batch_for_step(view.tokens, view.manifest.data.data_key, view.cfg, 0)
    state1 = single_process_step(view.cfg, "reference", view.manifest.arithmetic)(state0, batch).state
    body = _body(traced_copy)
    body["steps"][0]["output"] = digest_state(_bumped(state1)).to_dict()  # state 1 has no checkpoint
    write_manifest(traced_copy, body, audit_publisher)
    report = verify_range(open_run(traced_copy), _steps(0, 3), "reference", diagnose=False)
    assert [a.verdict for a in report.audits] == [MISMATCH, ERROR, MATCH, MATCH]
    assert "step 0 mismatched" in report.audits[1].note and report.audits[1].observed_digest is None
    assert report.any_mismatch and not report.all_match


@pytest.mark.slow  # 2 s (fast tier: pytest -m 'not slow')
def test_a_claimed_data_digest_that_is_not_the_schedules_is_a_mismatch(traced_copy, audit_publisher):
    body = _body(traced_copy)
    body["steps"][2]["data"] = format_digest(bytes(32))
    write_manifest(traced_copy, body, audit_publisher)
    report = verify_range(open_run(traced_copy), _steps(2, 3), "reference")
    assert report.audits[0].verdict == MISMATCH and "another slice of data" in report.audits[0].note
    assert report.audits[0].findings == ("data",)
    # The output state itself is the published one, so the next step is still checked.
    assert report.audits[1].verdict == MATCH


def test_a_bad_checkpoint_inside_the_range_stops_before_any_step(traced_copy):
    path = traced_copy / "checkpoints" / "step-00000002.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    seen = []
    with pytest.raises(InputError, match=str(path)):
        verify_range(open_run(traced_copy), _steps(0, 1), "reference", on_audit=seen.append)
    assert seen == []
