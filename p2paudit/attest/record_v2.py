"""Attestation body version 2: every outcome of a replay is signable, and the record says what was found.

The 19-field array documented in docs/attestation.md ("Version 2"):

    0 version (2)  1 run_id  2 subject  3 step  4 input_digest
    5 claimed_data_digest  6 observed_data_digest  7 claimed_output_digest  8 observed_output_digest
    9 claimed_loss_bits  10 observed_loss_bits  11 findings  12 verdict  13 engine_version
    14 arithmetic_version  15 backend  16 hardware  17 time_ms  18 verifier

Losses are the uint64 of their IEEE-754 binary64 bits (no msgpack floats:
one value, one encoding, NaN payloads and -0.0 included). Findings are a
msgpack array of strings, a strictly increasing sub-sequence of FINDINGS.
The rules tying verdict, findings and the claimed/observed pairs are checked
on construction, so an invalid record cannot exist.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from p2paudit.attest.codec import (
    MAX_UINT64,
    check_common,
    check_digest,
    check_int,
    check_optional_digest,
    digest_text,
    pack,
)
from p2paudit.attest.errors import AttestationError

VERSION_2 = 2
DOMAIN_V2 = b"p2paudit/attestation/v2\x00"
VERDICTS = ("match", "mismatch", "error")
SUBJECTS = ("step", "init")
# The wire order of findings; equal to p2paudit.audit.records.FINDINGS (a test holds them equal).
FINDINGS = ("init", "counter", "data", "state", "loss")
INIT_INDEX_STEP = -1  # where the store indexes an init record: state 0 is the claim "before" step 0
FIELDS_V2 = (
    "version",
    "run_id",
    "subject",
    "step",
    "input_digest",
    "claimed_data_digest",
    "observed_data_digest",
    "claimed_output_digest",
    "observed_output_digest",
    "claimed_loss_bits",
    "observed_loss_bits",
    "findings",
    "verdict",
    "engine_version",
    "arithmetic_version",
    "backend",
    "hardware",
    "time_ms",
    "verifier",
)
_OBSERVED_FIELD = {
    "init": "observed_output_digest",
    "data": "observed_data_digest",
    "state": "observed_output_digest",
    "loss": "observed_loss_bits",
}
_STEP_PARTS = ("input_digest", "claimed_data_digest", "observed_data_digest", "claimed_loss_bits", "observed_loss_bits")


def _check_loss(name: str, value: Any) -> None:
    if value is not None:
        check_int(name, value, MAX_UINT64)


@dataclass(frozen=True)
class AttestationV2:
    """One verifier's signed statement about one replayed step (subject "step": state n -> n + 1)
    or about the rebuilt initial state (subject "init", step 0).

    Preconditions, all checked here (AttestationError otherwise):
    - subject "init": step 0; input, data and loss fields all None; the state
      pair is the claimed and rebuilt state 0. Subject "step": input,
      claimed data and claimed loss present.
    - "match": everything observed and equal to its claim; findings empty.
    - "mismatch": everything observed; findings non-empty; "data", "state",
      "loss" ("init" for subject init) named exactly when that pair differs;
      "counter" (step only) is the verifier's judgment of the input's counter.
    - "error": nothing observed, findings empty.
    """

    run_id: bytes
    subject: str
    step: int
    input_digest: bytes | None
    claimed_data_digest: bytes | None
    observed_data_digest: bytes | None
    claimed_output_digest: bytes
    observed_output_digest: bytes | None
    claimed_loss_bits: int | None
    observed_loss_bits: int | None
    findings: tuple[str, ...]
    verdict: str
    engine_version: str
    arithmetic_version: int
    backend: str
    hardware: str
    time_ms: int
    verifier: bytes
    version: int = VERSION_2

    def __post_init__(self) -> None:
        if type(self.version) is not int or self.version != VERSION_2:
            raise AttestationError(f"attestation version {self.version!r} is not {VERSION_2} (a v2 record)")
        check_common(self)
        self._check_shape()
        self._check_findings()
        self._check_verdict()

    def _check_shape(self) -> None:
        if type(self.subject) is not str or self.subject not in SUBJECTS:
            raise AttestationError(f"attestation subject {self.subject!r} is not one of {', '.join(SUBJECTS)}")
        check_digest("claimed_output_digest", self.claimed_output_digest)
        check_optional_digest("observed_output_digest", self.observed_output_digest)
        if self.subject == "init":
            if self.step != 0:
                raise AttestationError(f"attestation of init has step {self.step}, want 0")
            present = [name for name in _STEP_PARTS if getattr(self, name) is not None]
            if present:
                raise AttestationError(f"attestation of init carries {', '.join(present)}; want none (nil)")
            return
        for name in ("input_digest", "claimed_data_digest"):
            check_digest(name, getattr(self, name))
        check_optional_digest("observed_data_digest", self.observed_data_digest)
        if self.claimed_loss_bits is None:
            raise AttestationError("attestation of a step has no claimed loss")
        _check_loss("claimed_loss_bits", self.claimed_loss_bits)
        _check_loss("observed_loss_bits", self.observed_loss_bits)

    def _check_findings(self) -> None:
        if type(self.findings) is not tuple:
            raise AttestationError(f"attestation findings is {type(self.findings).__name__}, want a sequence")
        positions = []
        for item in self.findings:
            if type(item) is not str or item not in FINDINGS:
                raise AttestationError(f"attestation finding {item!r} is not one of {', '.join(FINDINGS)}")
            positions.append(FINDINGS.index(item))
        if positions != sorted(set(positions)):
            raise AttestationError(
                f"attestation findings {list(self.findings)} are not distinct and in the order {', '.join(FINDINGS)}"
            )

    def pairs(self) -> dict[str, tuple[Any, Any]]:
        """The (claimed, observed) pair behind each finding the pairs decide, for this subject."""
        if self.subject == "init":
            return {"init": (self.claimed_output_digest, self.observed_output_digest)}
        return {
            "data": (self.claimed_data_digest, self.observed_data_digest),
            "state": (self.claimed_output_digest, self.observed_output_digest),
            "loss": (self.claimed_loss_bits, self.observed_loss_bits),
        }

    def _check_verdict(self) -> None:
        if type(self.verdict) is not str or self.verdict not in VERDICTS:
            raise AttestationError(f"attestation verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")
        pairs = self.pairs()
        unobserved = [name for name, (_, observed) in pairs.items() if observed is None]
        if self.verdict == "error":
            observed = [name for name in pairs if name not in unobserved]
            if observed or self.findings:
                raise AttestationError(
                    f"attestation with verdict error observed {observed} and found "
                    f"{list(self.findings)}; want nothing observed and no findings"
                )
            return
        if unobserved:
            missing = ", ".join(_OBSERVED_FIELD[name] for name in unobserved)
            raise AttestationError(f"attestation with verdict {self.verdict} has no {missing}")
        differ = [name for name, (claimed, observed) in pairs.items() if observed != claimed]
        if self.verdict == "match":
            if differ or self.findings:
                raise AttestationError(
                    f"attestation says match but the pairs {differ} differ and the findings "
                    f"are {list(self.findings)}; want neither"
                )
            return
        judged = ("counter",) if self.subject == "step" else ()
        named = [name for name in self.findings if name not in judged]
        if not self.findings:
            raise AttestationError("attestation says mismatch but has no findings")
        if named != [name for name in FINDINGS if name in differ]:
            raise AttestationError(
                f"attestation of {self.subject} {self.step} finds {list(self.findings)} but "
                f"the pairs that differ are {differ}; want exactly those"
                + (" (plus counter when judged)" if judged else "")
            )

    @property
    def index_step(self) -> int:
        """Where the store indexes the record: the step, or INIT_INDEX_STEP (-1) for init, so that an
        init attestation and a step-0 attestation of one key are two statements, not an equivocation."""
        return INIT_INDEX_STEP if self.subject == "init" else self.step

    def result(
        self,
    ) -> tuple[
        str, bytes | None, bytes | None, bytes | None, bytes, bytes | None, int | None, int | None, tuple[str, ...], str
    ]:
        """What the verifier asserts, without time, machine or version details (hashable: a set of
        results is how the queries find equivocations)."""
        return (
            self.subject,
            self.input_digest,
            self.claimed_data_digest,
            self.observed_data_digest,
            self.claimed_output_digest,
            self.observed_output_digest,
            self.claimed_loss_bits,
            self.observed_loss_bits,
            self.findings,
            self.verdict,
        )

    def result_digest(self) -> bytes:
        """SHA-256 of the canonical msgpack of `result()`."""
        return hashlib.sha256(pack(list(self.result()))).digest()

    def to_dict(self) -> dict[str, Any]:
        """The JSON view: digests as "sha256:<hex>", losses as 16 hex digits of their bits and as text."""

        def loss(bits: int | None) -> str | None:
            return None if bits is None else f"{bits:016x}"

        return {
            "version": self.version,
            "run_id": self.run_id.hex(),
            "subject": self.subject,
            "step": self.step,
            "input_digest": digest_text(self.input_digest),
            "claimed_data_digest": digest_text(self.claimed_data_digest),
            "observed_data_digest": digest_text(self.observed_data_digest),
            "claimed_output_digest": digest_text(self.claimed_output_digest),
            "observed_output_digest": digest_text(self.observed_output_digest),
            "claimed_loss_bits": loss(self.claimed_loss_bits),
            "observed_loss_bits": loss(self.observed_loss_bits),
            "findings": list(self.findings),
            "verdict": self.verdict,
            "engine_version": self.engine_version,
            "arithmetic_version": self.arithmetic_version,
            "backend": self.backend,
            "hardware": self.hardware,
            "time_ms": self.time_ms,
            "verifier": self.verifier.hex(),
        }


def encode_v2(record: AttestationV2) -> bytes:
    """The canonical body bytes of a (valid, by construction) v2 record."""
    return pack([list(record.findings) if name == "findings" else getattr(record, name) for name in FIELDS_V2])


def record_v2_from_fields(values: list[Any]) -> AttestationV2:
    """A v2 record from a parsed body array (the caller checks canonical bytes)."""
    if len(values) != len(FIELDS_V2):
        raise AttestationError(f"attestation body has {len(values)} fields, want {len(FIELDS_V2)} (version 2)")
    fields = dict(zip(FIELDS_V2, values))
    findings = fields["findings"]
    if type(findings) is not list:
        raise AttestationError(f"attestation findings is a msgpack {type(findings).__name__}, want an array")
    fields["findings"] = tuple(findings)
    return AttestationV2(**fields)
