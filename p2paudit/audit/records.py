"""Per-step audit results: what a verifier saw when it replayed one step.

The attestation layer signs these; everything is plain data with raw digests
inside and `sha256:<hex>` in `to_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass

from p2paudit.run.digest import format_digest

MATCH = "match"
MISMATCH = "mismatch"
ERROR = "error"
VERDICTS = (MATCH, MISMATCH, ERROR)


@dataclass(frozen=True)
class StepAudit:
    """The replay of step `step` of run `run_id` (0-based: state step -> state step + 1).

    input_digest: the published digest of the state the step started from;
    data_digest: digest of the batch the verifier drew from the schedule;
    claimed_digest / observed_digest: published and replayed output state;
    verdict: "match", "mismatch", or "error" (the step could not be checked,
    e.g. its input is not the published state after an earlier mismatch).
    observed_digest is None when the step was not run.
    """

    run_id: bytes
    step: int
    input_digest: bytes
    data_digest: bytes
    claimed_digest: bytes
    observed_digest: bytes | None
    verdict: str
    backend: str
    seconds: float
    note: str = ""
    engine_version: str = ""  # the verifier's engine and arithmetic versions
    arithmetic_version: int = 0

    def to_dict(self) -> dict:
        return {
            "run_id": format_digest(self.run_id), "step": self.step,
            "input_digest": format_digest(self.input_digest), "data_digest": format_digest(self.data_digest),
            "claimed_digest": format_digest(self.claimed_digest),
            "observed_digest": None if self.observed_digest is None else format_digest(self.observed_digest),
            "verdict": self.verdict, "backend": self.backend, "seconds": self.seconds, "note": self.note,
            "engine_version": self.engine_version, "arithmetic_version": self.arithmetic_version,
        }
