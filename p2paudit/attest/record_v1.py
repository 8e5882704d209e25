"""Attestation body version 1: read and verified forever (old ledgers hold v1 leaves), never signed anew.

The 14-field array documented in docs/attestation.md ("Version 1"). Its
verdict is tied to the output digests only, so a difference in data alone
cannot be stated in it; version 2 (record_v2) replaced it for new records.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from p2paudit.attest.codec import check_common, check_digest, digest_text, pack
from p2paudit.attest.errors import AttestationError

VERSION_1 = 1
DOMAIN_V1 = b"p2paudit/attestation/v1\x00"
VERDICTS = ("match", "mismatch", "error")
FIELDS_V1 = (
    "version",
    "run_id",
    "step",
    "input_digest",
    "data_digest",
    "claimed_output_digest",
    "observed_output_digest",
    "verdict",
    "engine_version",
    "arithmetic_version",
    "backend",
    "hardware",
    "time_ms",
    "verifier",
)


@dataclass(frozen=True)
class AttestationV1:
    """A version-1 record: one verifier's statement about one replayed step (validated on construction).

    data_digest is the digest of the batch the verifier drew (what v1 replays
    recorded); "match" means observed == claimed output, "mismatch" observed
    != claimed, "error" no observed output.
    """

    run_id: bytes
    step: int
    input_digest: bytes
    data_digest: bytes
    claimed_output_digest: bytes
    observed_output_digest: bytes | None
    verdict: str
    engine_version: str
    arithmetic_version: int
    backend: str
    hardware: str
    time_ms: int
    verifier: bytes
    version: int = VERSION_1

    def __post_init__(self) -> None:
        if type(self.version) is not int or self.version != VERSION_1:
            raise AttestationError(f"attestation version {self.version!r} is not {VERSION_1} (a v1 record)")
        check_common(self)
        for name in ("input_digest", "data_digest", "claimed_output_digest"):
            check_digest(name, getattr(self, name))
        self._check_verdict()

    def _check_verdict(self) -> None:
        if self.verdict not in VERDICTS:
            raise AttestationError(f"attestation verdict {self.verdict!r} is not one of {', '.join(VERDICTS)}")
        observed = self.observed_output_digest
        if self.verdict == "error":
            if observed is not None:
                raise AttestationError("attestation with verdict error carries an observed digest; want none")
            return
        if observed is None:
            raise AttestationError(f"attestation with verdict {self.verdict} has no observed digest")
        check_digest("observed_output_digest", observed)
        if self.verdict == "match" and observed != self.claimed_output_digest:
            raise AttestationError("attestation says match but observed digest differs from claimed")
        if self.verdict == "mismatch" and observed == self.claimed_output_digest:
            raise AttestationError("attestation says mismatch but observed digest equals claimed")

    @property
    def subject(self) -> str:
        return "step"  # v1 records only ever attest steps

    @property
    def index_step(self) -> int:
        """Where the store indexes the record: the step itself (see record_v2.AttestationV2.index_step)."""
        return self.step

    def result(self) -> tuple[bytes, bytes, bytes, str, bytes | None]:
        """What the verifier asserts about the step, without time or machine details (unchanged since v1)."""
        return (
            self.input_digest,
            self.data_digest,
            self.claimed_output_digest,
            self.verdict,
            self.observed_output_digest,
        )

    def result_digest(self) -> bytes:
        """SHA-256 of the canonical msgpack of `result()`."""
        return hashlib.sha256(pack(list(self.result()))).digest()

    def to_dict(self) -> dict[str, Any]:
        """The JSON view: digests as "sha256:<hex>", run id and key as hex (exactly as before v2, so
        DSSE envelopes exported from v1 records still import)."""
        return {
            "version": self.version,
            "run_id": self.run_id.hex(),
            "step": self.step,
            "input_digest": digest_text(self.input_digest),
            "data_digest": digest_text(self.data_digest),
            "claimed_output_digest": digest_text(self.claimed_output_digest),
            "observed_output_digest": digest_text(self.observed_output_digest),
            "verdict": self.verdict,
            "engine_version": self.engine_version,
            "arithmetic_version": self.arithmetic_version,
            "backend": self.backend,
            "hardware": self.hardware,
            "time_ms": self.time_ms,
            "verifier": self.verifier.hex(),
        }


def encode_v1(record: AttestationV1) -> bytes:
    """The canonical body bytes of a (valid, by construction) v1 record."""
    return pack([getattr(record, name) for name in FIELDS_V1])


def record_v1_from_fields(values: list[Any]) -> AttestationV1:
    """A v1 record from a parsed body array (the caller checks canonical bytes)."""
    if len(values) != len(FIELDS_V1):
        raise AttestationError(f"attestation body has {len(values)} fields, want {len(FIELDS_V1)} (version 1)")
    return AttestationV1(**dict(zip(FIELDS_V1, values)))
