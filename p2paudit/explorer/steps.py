"""One claim of a run (a step, or the initial state) with every attestation of it, what each found, and why it differs.

Each attestation is read from its leaf and verified again (its signature and
rules); what differs is named pair by pair (data, state, loss, init), with
the loss's distance in binary64 ulps; and when outcomes depart from the claim or from each other, the
diagnosis the evidence holds (explorer.diagnosis_view: at which stage they part, the loss's ulps). Which
tensor and which operation first departs is not in the signed record: `verify-range` on the step recomputes it.
"""

from __future__ import annotations

import base64
from typing import Any, NotRequired, TypedDict

from p2paudit.attest.record import SignedAttestation, attestation_to_dict
from p2paudit.attest.record_v2 import INIT_INDEX_STEP
from p2paudit.attest.store import AttestationStore
from p2paudit.errors import InputError
from p2paudit.explorer.diagnosis_view import claim_diagnosis, loss_value, ulps_between
from p2paudit.explorer.outcomes import Outcome
from p2paudit.explorer.times import utc_text_ms
from p2paudit.explorer.verdicts import claim_verdict
from p2paudit.identity import peer_id_of

# (finding, claimed field, observed field) of a v2 record's JSON view
_PAIRS = (
    ("data", "claimed_data_digest", "observed_data_digest"),
    ("state", "claimed_output_digest", "observed_output_digest"),
    ("loss", "claimed_loss_bits", "observed_loss_bits"),
)
_CLAIM_FIELDS = ("input_digest", "claimed_data_digest", "data_digest", "claimed_output_digest", "claimed_loss_bits")


class Difference(TypedDict):
    """An observed value that is not its claim: which pair, both values (and, for the loss, values and ulps)."""

    finding: str
    claimed: str
    observed: str
    claimed_value: NotRequired[float | str | None]
    observed_value: NotRequired[float | str | None]
    ulps: NotRequired[int | None]


def differences(view: dict[str, Any]) -> list[Difference]:
    """Each observed value that differs from its claim: which pair, both values (and ulps for the loss)."""
    found = []
    pairs = (("init", "claimed_output_digest", "observed_output_digest"),) if view.get("subject") == "init" else _PAIRS
    for finding, claimed, observed in pairs:
        a, b = view.get(claimed), view.get(observed)
        if a is None or b is None or a == b:
            continue
        item = Difference(finding=finding, claimed=a, observed=b)
        if finding == "loss":
            item["claimed_value"], item["observed_value"] = loss_value(a), loss_value(b)
            item["ulps"] = ulps_between(a, b)
        found.append(item)
    return found


def attestation_view(index: int, signed: SignedAttestation) -> dict[str, Any]:
    """The JSON view of one stored attestation, with its peer id, differing pairs and signed bytes (base64)."""
    view = attestation_to_dict(signed.attestation)
    view.setdefault("subject", "step")
    view.setdefault("findings", [])
    return {
        "index": index,
        **view,
        "time": utc_text_ms(signed.attestation.time_ms),  # the signed time as a date (times.py: any int)
        "peer_id": peer_id_of(signed.attestation.verifier),
        "claimed_loss": loss_value(view.get("claimed_loss_bits")),
        "observed_loss": loss_value(view.get("observed_loss_bits")),
        "differences": differences(view),
        "signed_attestation": base64.b64encode(signed.encoded).decode("ascii"),
        "bytes": len(signed.encoded),
    }


def _outcomes(views: list[dict[str, Any]]) -> list[Outcome]:
    groups: dict[tuple[str, str | None], Outcome] = {}
    for view in views:
        key: tuple[str, str | None] = (view["verdict"], view["observed_output_digest"])
        group = groups.setdefault(key, {"verdict": key[0], "observed_output_digest": key[1], "signers": []})
        group["signers"].append({"verifier": view["verifier"], "index": view["index"]})
    return list(groups.values())


def _claims(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The distinct claims the attestations were made against (honest verifiers all read the same manifest)."""
    groups: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
    for view in views:
        claim = {name: view[name] for name in _CLAIM_FIELDS if name in view}
        group = groups.setdefault(tuple(sorted(claim.items())), {**claim, "attestations": 0})
        group["attestations"] += 1
    for group in groups.values():
        group["claimed_loss"] = loss_value(group.get("claimed_loss_bits"))
    return list(groups.values())


def _equivocating(store_views: list[tuple[SignedAttestation, dict[str, Any]]]) -> list[str]:
    results: dict[bytes, set[tuple[object, ...]]] = {}
    for signed, _ in store_views:
        results.setdefault(signed.attestation.verifier, set()).add(signed.attestation.result())
    return sorted(key.hex() for key, found in results.items() if len(found) > 1)


def claim_detail(store: AttestationStore, run_id: bytes, step: int) -> dict[str, Any]:
    """Every attestation of one claim: `step` >= 0, or INIT_INDEX_STEP (-1) for the initial state."""
    info = store.run_info(run_id)
    if not INIT_INDEX_STEP <= step < info.steps:
        raise InputError(f"step {step} is not in run {run_id.hex()[:16]}..., which has {info.steps} steps")
    found = store.step_attestations(run_id, step)
    pairs = [(signed, attestation_view(index, signed)) for index, signed in found]
    views = [view for _, view in pairs]
    outcomes, claims = _outcomes(views), _claims(views)
    keys = {view["verifier"] for view in views}
    init = step == INIT_INDEX_STEP
    return {
        "run_id": run_id.hex(),
        "label": info.label,
        "steps": info.steps,
        "subject": "init" if init else "step",
        "step": 0 if init else step,
        "claims": claims,
        "outcomes": outcomes,
        "disputed": len(keys) >= 2 and len(outcomes) >= 2,
        "verdict": claim_verdict("init" if init else "step", 0 if init else step, views),  # sentence and tone
        "equivocating_keys": _equivocating(pairs),
        "diagnosis": claim_diagnosis("init" if init else "step", claims, views, outcomes),
        "attestations": views,
    }
