"""explorer.diagnosis_view on claims built by hand: a finding only the record names (the step counter)."""

from __future__ import annotations

from p2paudit.explorer.diagnosis_view import claim_diagnosis

CLAIM = {
    "claimed_data_digest": "sha256:aa",
    "claimed_output_digest": "sha256:bb",
    "claimed_loss_bits": "4004000000000000",
}


def view(index: int, verdict: str, findings: list[str], output: str) -> dict:
    observed = {"observed_data_digest": "sha256:aa", "observed_output_digest": output}
    return {
        "index": index,
        "verdict": verdict,
        "findings": findings,
        "observed_loss_bits": "4004000000000000",
        **observed,
    }


def test_a_counter_finding_is_the_first_departure_though_no_observed_counter_is_signed() -> None:
    views = [view(0, "match", [], "sha256:bb"), view(1, "mismatch", ["counter", "state"], "sha256:cc")]
    outcomes = [
        {"verdict": "match", "signers": [{"index": 0}]},
        {"verdict": "mismatch", "signers": [{"index": 1}]},
    ]
    found = claim_diagnosis("step", [CLAIM], views, outcomes)
    assert [p["part"] for p in found["parts"]] == ["counter", "data", "loss", "state"]
    assert found["first_departure"] == "counter" and "step counter" in found["stage"]


def test_nothing_departs_when_every_outcome_matches() -> None:
    views = [view(0, "match", [], "sha256:bb"), view(1, "match", [], "sha256:bb")]
    outcomes = [{"verdict": "match", "signers": [{"index": 0}, {"index": 1}]}]
    assert claim_diagnosis("step", [CLAIM], views, outcomes) is None
    assert claim_diagnosis("step", [], [], []) is None
