"""Per-step audit results: what a verifier saw when it replayed one step, or rebuilt state 0.

The attestation layer signs these; everything is plain data with raw digests
inside and `sha256:<hex>` in `to_dict`.

A claim has parts, and a verdict says which parts were recomputed and found
different (`findings`, in the fixed order of FINDINGS):

    init     the state 0 the recipe builds (config, seed, arithmetic) is not the claimed state 0
    counter  the input state's step counter is not the step being replayed
    data     the batch the schedule draws for this step is not the claimed data digest
    state    the replayed output state is not the claimed state n + 1
    loss     the replayed loss is not the claimed loss, bit for bit

"match" means the step was run and nothing differs; "mismatch" means it was
run and `findings` is not empty; "error" means it could not be checked (its
input is not the published state, after an earlier mismatch), and then
nothing was observed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TypedDict

from p2paudit.run.digest import format_digest

MATCH = "match"
MISMATCH = "mismatch"
ERROR = "error"
VERDICTS = (MATCH, MISMATCH, ERROR)

STEP = "step"  # the audit of step n: state n -> state n + 1
INIT = "init"  # the audit of state 0 against the recipe
SUBJECTS = (STEP, INIT)

FINDINGS = ("init", "counter", "data", "state", "loss")


def loss_bits(loss: float) -> int:
    """The IEEE-754 binary64 bits of a loss: losses are compared as bits (NaN, -0.0 included)."""
    return int.from_bytes(struct.pack("<d", loss), "little")


def same_loss(a: float, b: float) -> bool:
    return loss_bits(a) == loss_bits(b)


class StepAuditDict(TypedDict):
    """StepAudit.to_dict: digests as "sha256:<hex>" (None where absent), losses as floats."""

    run_id: str
    subject: str
    step: int
    input_digest: str | None
    claimed_data: str | None
    observed_data: str | None
    claimed_digest: str | None
    observed_digest: str | None
    claimed_loss: float | None
    observed_loss: float | None
    findings: list[str]
    verdict: str
    backend: str
    seconds: float
    note: str
    engine_version: str
    arithmetic_version: int


@dataclass(frozen=True)
class StepAudit:
    """The replay of step `step` of run `run_id` (0-based: state step -> state step + 1),
    or, with subject INIT, the rebuild of state 0 from the recipe (then `step` is 0).

    input_digest: the published digest of the state the step started from (None for INIT);
    claimed_data / observed_data: the claimed data digest and the digest of the
    batch the verifier drew from the schedule (None for INIT; observed None when not run);
    claimed_digest / observed_digest: published and replayed output state
    (for INIT: claimed and rebuilt state 0);
    claimed_loss / observed_loss: the published and replayed loss (None for INIT);
    findings: the parts that differ (a sub-sequence of FINDINGS), empty unless mismatch.
    """

    run_id: bytes
    step: int
    input_digest: bytes | None
    claimed_data: bytes | None
    observed_data: bytes | None
    claimed_digest: bytes
    observed_digest: bytes | None
    claimed_loss: float | None
    observed_loss: float | None
    findings: tuple[str, ...]
    verdict: str
    backend: str
    seconds: float
    note: str = ""
    engine_version: str = ""  # the verifier's engine and arithmetic versions
    arithmetic_version: int = 0
    subject: str = STEP

    def to_dict(self) -> StepAuditDict:
        def digest(value: bytes | None) -> str | None:
            return None if value is None else format_digest(value)

        return {
            "run_id": format_digest(self.run_id),
            "subject": self.subject,
            "step": self.step,
            "input_digest": digest(self.input_digest),
            "claimed_data": digest(self.claimed_data),
            "observed_data": digest(self.observed_data),
            "claimed_digest": digest(self.claimed_digest),
            "observed_digest": digest(self.observed_digest),
            "claimed_loss": self.claimed_loss,
            "observed_loss": self.observed_loss,
            "findings": list(self.findings),
            "verdict": self.verdict,
            "backend": self.backend,
            "seconds": self.seconds,
            "note": self.note,
            "engine_version": self.engine_version,
            "arithmetic_version": self.arithmetic_version,
        }
