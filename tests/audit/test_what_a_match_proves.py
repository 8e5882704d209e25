"""A "match" means the run came from its recipe: initial state, step counter, data, every state and the loss.

Each test plays a dishonest publisher holding its own key, who publishes a run
that is internally consistent (every checkpoint agrees with the signed
manifest) but was not produced by its recipe.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from p2paudit.audit.records import INIT, MATCH, MISMATCH
from p2paudit.audit.replay import StepRange, open_run, parse_step_range, verify_range
from p2paudit.engine import state as engine_state
from p2paudit.run import publisher as publisher_module
from p2paudit.run.manifest import write_manifest
from p2paudit.run.publisher import TrainPlan, publish_run


def _publish_from(monkeypatch, run_dir: Path, publisher, change_state0) -> None:
    """Publish tiny (4 steps, checkpoints every 2) honestly, except that state 0 is change_state0(recipe's)."""
    honest_init = engine_state.init_state
    monkeypatch.setattr(publisher_module, "init_state", lambda cfg: change_state0(honest_init(cfg)))
    publish_run(TrainPlan(run_dir, "tiny", steps=4, ckpt_every=2, backend="reference"), publisher)
    monkeypatch.setattr(publisher_module, "init_state", honest_init)


def _backdoored(state: dict) -> dict:
    """Other initial weights: one element of one attention matrix changed (a stand-in for a backdoor)."""
    wq = state["params/h.0.attn.wq"].copy()
    wq[0, 0] = np.float32(0.5)
    return dict(state, **{"params/h.0.attn.wq": wq})


def _counter_at(value: int):
    return lambda state: dict(state, step=np.array(value, dtype=np.int64))


@pytest.mark.slow  # 3 s (fast tier: pytest -m 'not slow')
def test_other_initial_weights_are_caught_when_the_range_includes_step_0(monkeypatch, tmp_path, audit_publisher):
    _publish_from(monkeypatch, tmp_path / "run", audit_publisher, _backdoored)
    view = open_run(tmp_path / "run")
    report = verify_range(view, parse_step_range("0-3", 4), "reference", diagnose=False)
    init, *steps = report.audits
    assert (init.subject, init.verdict, init.findings) == (INIT, MISMATCH, ("init",))
    assert init.claimed_digest == view.manifest.initial_state.digest != init.observed_digest
    # Every step is an honest function of the claimed state 0: only the init check can tell.
    assert [a.verdict for a in steps] == [MATCH] * 4
    assert not report.all_match and report.any_mismatch


def test_verify_range_init_checks_state_0_alone(monkeypatch, tmp_path, audit_publisher, traced_run):
    honest = verify_range(open_run(traced_run), parse_step_range("init", 4), "reference")
    assert [(a.subject, a.verdict) for a in honest.audits] == [(INIT, MATCH)]
    _publish_from(monkeypatch, tmp_path / "run", audit_publisher, _backdoored)
    report = verify_range(open_run(tmp_path / "run"), parse_step_range("init", 4), "reference")
    assert [(a.subject, a.verdict, a.findings) for a in report.audits] == [(INIT, MISMATCH, ("init",))]


@pytest.mark.slow  # 2.7 s (fast tier: pytest -m 'not slow')
def test_a_range_without_step_0_does_not_rebuild_state_0(monkeypatch, tmp_path, audit_publisher):
    _publish_from(monkeypatch, tmp_path / "run", audit_publisher, _backdoored)
    report = verify_range(open_run(tmp_path / "run"), parse_step_range("1-3", 4), "reference")
    assert [(a.subject, a.step, a.verdict) for a in report.audits] == [("step", n, MATCH) for n in (1, 2, 3)]


@pytest.mark.slow  # 3 s (fast tier: pytest -m 'not slow')
def test_a_step_counter_that_starts_at_1000_is_caught_at_every_step(monkeypatch, tmp_path, audit_publisher):
    _publish_from(monkeypatch, tmp_path / "run", audit_publisher, _counter_at(1000))
    view = open_run(tmp_path / "run")
    report = verify_range(view, StepRange(True, 0, 3), "reference", diagnose=False)
    init, *steps = report.audits
    assert init.findings == ("init",)
    # The learning-rate schedule moved: each step's input counter is 1000 + n, not n.
    assert [a.findings for a in steps] == [("counter",)] * 4
    assert all("step counter is 100" in a.note for a in steps)
    # A volunteer who audits step 2 alone (from checkpoint 2) sees it too.
    alone = verify_range(view, StepRange(False, 2, 2), "reference", diagnose=False)
    assert [(a.verdict, a.findings) for a in alone.audits] == [(MISMATCH, ("counter",))]


def _resign(run_dir: Path, publisher, edit) -> None:
    body = json.loads((run_dir / "manifest.json").read_bytes())
    edit(body)
    write_manifest(run_dir, body, publisher)


def test_a_prettier_loss_curve_is_a_mismatch_of_the_claim(traced_copy, audit_publisher):
    def prettier(body: dict) -> None:
        body["steps"][1]["loss"] = body["steps"][1]["loss"] - 0.25
        body["loss_curve"] = [s["loss"] for s in body["steps"]]

    _resign(traced_copy, audit_publisher, prettier)
    report = verify_range(open_run(traced_copy), StepRange(False, 0, 3), "reference")
    assert [a.verdict for a in report.audits] == [MATCH, MISMATCH, MATCH, MATCH]
    bad = report.audits[1]
    assert bad.findings == ("loss",) and bad.observed_digest == bad.claimed_digest
    assert bad.observed_loss - bad.claimed_loss == pytest.approx(0.25)
    assert not report.diagnoses  # the state matched: nothing to bisect


def test_a_loss_one_ulp_off_is_a_mismatch(traced_copy, audit_publisher):
    def nudged(body: dict) -> None:
        loss = np.float32(body["steps"][2]["loss"])
        body["steps"][2]["loss"] = float(np.nextafter(loss, np.float32(np.inf)))
        body["loss_curve"] = [s["loss"] for s in body["steps"]]

    _resign(traced_copy, audit_publisher, nudged)
    report = verify_range(open_run(traced_copy), StepRange(False, 2, 2), "reference")
    assert [(a.verdict, a.findings) for a in report.audits] == [(MISMATCH, ("loss",))]
