"""What the ledger's evidence says about where a claim departs: the claim and each outcome, part by part.

A signed attestation holds, besides its verdict and findings, what its
replay observed: the data slice's digest, the loss (binary64 bits) and the
output state's digest (for the initial state, state 0's digest). Put side by
side with the claim, they say at which stage of the step the outcomes part:

    counter  the input state's step counter is not the step's (a finding: the record signs no observed counter)
    data     the batch read differs: everything after it differs too
    loss     the same batch, a different loss: the forward pass departs
    state    the same loss to the bit, a different state: the backward pass or the optimizer update departs

and, for the loss, by how many binary64 ulps. What they cannot say: which
tensor differs, by how many ulps per tensor, and which operation first
departs; a record signs whole-state digests, not per-tensor digests or an
operation trace. `MISSING` says so, and what recomputes it.
"""

from __future__ import annotations

import struct
from typing import Any, NotRequired, TypedDict

from p2paudit.explorer.outcomes import Outcome

# (part, the claim's field, an attestation's observed field, the stage it names), in the order a step computes
STEP_PARTS = (
    ("data", "claimed_data_digest", "observed_data_digest", "the batch read (data)"),
    ("loss", "claimed_loss_bits", "observed_loss_bits", "the forward pass (the loss differs, on the same batch)"),
    (
        "state",
        "claimed_output_digest",
        "observed_output_digest",
        "the backward pass or the optimizer update (the loss agrees to the bit, the output state does not)",
    ),
)
COUNTER_PART = ("counter", "", "", "the input state (its step counter is not the step's)")
INIT_PARTS = (("init", "claimed_output_digest", "observed_output_digest", "state 0 rebuilt from the recipe"),)
MISSING = (
    "which tensor differs, by how many ulps, and which operation first departs: an attestation signs "
    "whole-state digests and the loss, not per-tensor digests or an operation trace. "
    "`p2paudit verify-range N --run RUN` on the step recomputes them (docs/explorer.md)"
)


def loss_value(bits_hex: str | None) -> float | str | None:
    """The binary64 loss its 16 hex digits of bits stand for (text for NaN and infinities, which JSON lacks)."""
    if bits_hex is None:
        return None
    value = struct.unpack("<d", struct.pack("<Q", int(bits_hex, 16)))[0]
    return value if value == value and abs(value) != float("inf") else repr(value)


def _ordered(bits: int) -> int:
    """binary64 bits mapped to integers in the order of the values (so ulps are a difference)."""
    return bits if bits < 1 << 63 else (1 << 63) - bits


def ulps_between(a_hex: str | None, b_hex: str | None) -> int | None:
    if a_hex is None or b_hex is None:
        return None
    return abs(_ordered(int(a_hex, 16)) - _ordered(int(b_hex, 16)))


class Side(TypedDict):
    """One outcome as the diagnosis shows it: its number (from 1), verdict, keys and the findings they named."""

    outcome: int
    verdict: str
    keys: int
    findings: list[str]


class Part(TypedDict):
    """One part of the claim beside what each outcome observed of it (the loss also as values and ulps)."""

    part: str
    claimed: str | None
    observed: list[str | None]
    agree: bool
    claimed_value: NotRequired[float | str | None]
    observed_values: NotRequired[list[float | str | None]]
    ulps_from_claim: NotRequired[list[int | None]]
    max_ulps_between_outcomes: NotRequired[int | None]


class Diagnosis(TypedDict):
    sides: list[Side]
    parts: list[Part]
    first_departure: str | None
    stage: str | None
    tensor: None
    operation: None
    missing: str


def _sides(views: list[dict[str, Any]], outcomes: list[Outcome]) -> list[tuple[Side, dict[str, Any]]]:
    """Each outcome, with the attestation view its observed values are read from: its first signer's (every
    signer of it observed the same output; data and loss are taken from that one, with the findings every
    signer named)."""
    by_index = {view["index"]: view for view in views}
    sides = []
    for number, outcome in enumerate(outcomes, 1):
        signed = [by_index[s["index"]] for s in outcome["signers"] if s["index"] in by_index]
        first = signed[0]
        findings = sorted({f for view in signed for f in view.get("findings", [])})
        side = Side(outcome=number, verdict=outcome["verdict"], keys=len(signed), findings=findings)
        sides.append((side, first))
    return sides


def _part(
    name: str, claimed_field: str, observed_field: str, claim: dict[str, Any], seen: list[dict[str, Any]]
) -> Part:
    """`seen`: the attestation view each outcome is read from, in the order of the outcomes."""
    claimed = claim.get(claimed_field)
    observed = [view.get(observed_field) for view in seen]
    known = [value for value in observed if value is not None]
    item: Part = {
        "part": name,
        "claimed": claimed,
        "observed": observed,  # per outcome, in the order of `outcomes` (None: not observed, an error)
        "agree": len(set(known + ([claimed] if claimed is not None else []))) <= 1,
    }
    if name == "loss":
        item["claimed_value"] = loss_value(claimed)
        item["observed_values"] = [loss_value(value) for value in observed]
        item["ulps_from_claim"] = [ulps_between(claimed, value) for value in observed]
        pairs = [ulps_between(a, b) for n, a in enumerate(known) for b in known[n + 1 :]]
        item["max_ulps_between_outcomes"] = max((p for p in pairs if p is not None), default=0 if known else None)
    return item


def claim_diagnosis(
    subject: str, claims: list[dict[str, Any]], views: list[dict[str, Any]], outcomes: list[Outcome]
) -> Diagnosis | None:
    """The part-by-part comparison of the claim and each outcome, the first part where they depart and the stage
    it names; None when nothing departs (no attestation, or every outcome matches the claim)."""
    if not outcomes or (len(outcomes) < 2 and outcomes[0]["verdict"] != "mismatch"):
        return None
    found = _sides(views, outcomes)
    sides, seen = [side for side, _ in found], [view for _, view in found]
    claim = claims[0] if claims else {}
    table = INIT_PARTS if subject == "init" else STEP_PARTS
    parts = [_part(name, c, o, claim, seen) for name, c, o, _ in table]
    if any("counter" in side["findings"] for side in sides):  # named by the findings only: no observed value is signed
        table = (COUNTER_PART, *table)
        parts.insert(0, {"part": "counter", "agree": False, "claimed": None, "observed": [None] * len(sides)})
    first = next((n for n, part in enumerate(parts) if not part["agree"]), None)
    return {
        "sides": sides,
        "parts": parts,
        "first_departure": None if first is None else parts[first]["part"],
        "stage": None if first is None else table[first][3],
        "tensor": None,  # not in the signed record (MISSING)
        "operation": None,
        "missing": MISSING,
    }
