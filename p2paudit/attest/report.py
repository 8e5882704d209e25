"""JSON-ready views of query results (what `p2paudit ledger ... --json` prints).

Bytes are written as hex (keys, run ids), "sha256:<hex>" (digests) or base64
(signed evidence, so a reader can check it with any msgpack and Ed25519
library), never as Python reprs.
"""

from __future__ import annotations

import base64
from typing import Any

from ledger import SplitView
from p2paudit.attest.queries import Coverage, Dispute, Equivocations, Evidence, StepCoverage
from p2paudit.attest.record_v2 import INIT_INDEX_STEP
from p2paudit.errors import InputError


def parse_run_id(text: str) -> bytes:
    """A run id from 64 hex digits, optionally prefixed "sha256:"."""
    raw = text.strip().removeprefix("sha256:")
    try:
        run_id = bytes.fromhex(raw)
    except ValueError:
        raise InputError(f"run id {text[:80]!r} is not hex") from None
    if len(run_id) != 32:
        raise InputError(f"run id has {len(run_id)} bytes, want 32")
    return run_id


def digest_text(value: bytes | None) -> str | None:
    return None if value is None else "sha256:" + value.hex()


def coverage_dict(cov: Coverage) -> dict[str, Any]:
    """One coverage table: the summary and the steps with any attestation."""
    steps = cov.run.steps
    return {
        "trusted_only": cov.trusted_only,
        "label": "trusted keys" if cov.trusted_only else "all keys (untrusted: keys are free to make)",
        "keys": cov.keys,
        "steps": steps,
        "min": cov.min_count,
        "checked_at_least_once": cov.checked_once,
        "checked_at_least_min": cov.checked_min,
        "percent_at_least_once": round(cov.percent(cov.checked_once), 3),
        "percent_at_least_min": round(cov.percent(cov.checked_min), 3),
        "steps_with_mismatch": cov.with_mismatch,
        "per_step": [
            {"step": s.step, "checked": s.checked, "match": s.match, "mismatch": s.mismatch, "error": s.error}
            for s in cov.per_step
        ],
        "initial_state": _verdict_counts(cov.initial_state),
    }


def _verdict_counts(item: StepCoverage | None) -> dict[str, int]:
    """Distinct keys per verdict for one claim (all zero when nobody attested it)."""
    if item is None:
        return {"checked": 0, "match": 0, "mismatch": 0, "error": 0}
    return {"checked": item.checked, "match": item.match, "mismatch": item.mismatch, "error": item.error}


def evidence_dict(item: Evidence) -> dict[str, Any]:
    return {
        "index": item.index,
        "verifier": item.verifier.hex(),
        "verdict": item.verdict,
        "observed_output_digest": digest_text(item.observed),
        "signed_attestation": base64.b64encode(item.signed).decode("ascii"),
    }


def _claim(step: int) -> dict[str, Any]:
    """The index's step as what it names: step -1 is the initial state (subject "init", attest.tables)."""
    return {"subject": "init", "step": 0} if step == INIT_INDEX_STEP else {"subject": "step", "step": step}


def dispute_dict(dispute: Dispute) -> dict[str, Any]:
    return {
        "run_id": dispute.run_id.hex(),
        **_claim(dispute.step),
        "disputed": dispute.disputed,
        "sides": [[evidence_dict(item) for item in side] for side in dispute.sides],
    }


def split_view_dict(view: SplitView) -> dict[str, Any]:
    return {
        "vkey": view.vkey,
        "origin": view.origin,
        "size": view.size,
        "roots": [base64.b64encode(root).decode("ascii") for root in view.roots],
        "notes": list(view.notes),
    }


def equivocations_dict(found: Equivocations) -> dict[str, Any]:
    return {
        "keys": [
            {
                "run_id": e.run_id.hex(),
                **_claim(e.step),
                "verifier": e.verifier.hex(),
                "evidence": [evidence_dict(item) for item in e.evidence],
            }
            for e in found.keys
        ],
        "tree_heads": [split_view_dict(view) for view in found.tree_heads],
    }
