"""A lab script trained and replayed step by step: a match, a forged state, a forged op, another graph, another torch."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from p2paudit.errors import EXIT_USAGE, InputError
from p2paudit.lab import TorchBuildMismatch, load_script, replay_step, train_script
from p2paudit.lab.table import TABLE
from p2paudit.tensor_digest import digest_state

REPO = Path(__file__).resolve().parents[2]
LLAMA = REPO / "examples" / "lab_llama.py"


@pytest.fixture(scope="module")
def published():
    script = load_script(LLAMA)
    claims, states = train_script(script, 2, values=True)
    return script, claims, states


def test_an_honest_step_replays_bit_for_bit(published):
    script, claims, states = published
    assert digest_state(states[0]).digest == claims.initial.digest
    for step in (0, 1):
        verdict = replay_step(script, claims, states[step], step)
        assert verdict.state_matches and verdict.trace_matches and verdict.findings == ()


def test_a_forged_state_is_caught_and_the_ops_cleared(published):
    script, claims, states = published
    forged = {k: v.copy() for k, v in states[2].items()}
    forged["params/head.weight"].view(np.uint32)[0, 0] ^= 1
    lying = dataclasses.replace(claims, states=(claims.states[0], digest_state(forged)))
    verdict = replay_step(script, lying, states[1], 1)
    assert not verdict.state_matches and verdict.trace_matches
    assert verdict.findings[0] == "state after step 1 differs in 1 tensors: params/head.weight"
    assert verdict.findings[1].startswith("every op's outputs match")


def test_a_forged_op_is_named_as_the_first_departure(published, monkeypatch):
    script, claims, states = published
    honest_silu = TABLE["aten.silu.default"]

    def off_by_an_ulp(ctx, name, a):  # noqa: ANN001, ANN202
        out = honest_silu(ctx, name, a)
        out.numpy().view(np.uint32)[...] ^= 1
        return out

    monkeypatch.setitem(TABLE, "aten.silu.default", off_by_an_ulp)
    forged_claims, forged_states = train_script(script, 2, values=True)
    monkeypatch.setitem(TABLE, "aten.silu.default", honest_silu)
    verdict = replay_step(script, forged_claims, forged_states[1], 1)  # from the state the publisher published
    assert not verdict.state_matches and verdict.trace_matches
    assert "(aten.silu.default) is the first whose outputs differ" in verdict.findings[1]


def test_another_op_graph_is_its_own_finding(published, tmp_path):
    script, claims, states = published
    variant = tmp_path / "variant.py"
    variant.write_text(LLAMA.read_text().replace("x = x + self.o(", "x = x + 1.0 * self.o("))
    other_claims, _ = train_script(load_script(variant), 2)
    lying = dataclasses.replace(claims, traces=other_claims.traces, trace_ops=other_claims.trace_ops)
    verdict = replay_step(script, lying, states[1], 1)
    assert verdict.state_matches and not verdict.trace_matches  # 1.0 * y changes no value
    assert verdict.findings[0].startswith("the op sequence differs at op ")
    assert "aten.mul.Tensor" in verdict.findings[0]


def test_another_torch_build_is_refused_in_one_line(published):
    script, claims, states = published
    other = dataclasses.replace(claims, torch_build="torch 2.12.0+cpu (git 0123abc)")
    with pytest.raises(TorchBuildMismatch) as e:
        replay_step(script, other, states[1], 1)
    message = str(e.value)
    assert "torch 2.12.0+cpu (git 0123abc)" in message and "torch 2.13.0" in message and "\n" not in message
    assert e.value.exit_code == EXIT_USAGE


def test_another_script_is_refused(published, tmp_path):
    _, claims, states = published
    other = tmp_path / "other.py"
    other.write_text(LLAMA.read_text() + "\n# changed\n")
    with pytest.raises(InputError, match="is not the run's"):
        replay_step(load_script(other), claims, states[1], 1)


def test_a_script_without_the_interface_is_refused(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def build():\n    pass\n")
    with pytest.raises(InputError, match="does not define batch, train_step"):
        load_script(bad)
