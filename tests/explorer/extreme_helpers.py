"""A ledger of signed records at the limits of their wire format, for the explorer's pages and API.

Every value here is one a peer can sign and a node stores (the record codecs in p2paudit/attest/codec.py
and record_v2.py accept them): times from 0 to 2^63 - 1 ms (past JavaScript's Date range of 8.64e15 ms and
Python's datetime range of year 9999), the last step of a 2^32-step run, the largest arithmetic version,
NaN (with a payload), infinite and negative-zero losses, the longest text fields, markup in each, and a
run label with right-to-left, zero-width and combining characters (labels are local, but free text).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

from ledger import Checkpoint, NoteSigner, sign_checkpoint
from ledger.cosignature import RECEIVED, CosignatureSigner, insert_cosignature, verify_cosignature
from p2paudit.attest.codec import MAX_INT63
from p2paudit.attest.record import sign_attestation
from p2paudit.attest.runs import MAX_RUN_STEPS
from p2paudit.attest.store import AttestationStore, origin_for
from tests.attest.attest_helpers import key, make_record

EXTREME = hashlib.sha256(b"explorer extreme run").digest()
LAST_STEP = MAX_RUN_STEPS - 1
MAX_TIME_MS = MAX_INT63 - 1  # the largest time_ms a record may sign
JS_DATE_LIMIT_MS = 8_640_000_000_000_000  # new Date(x) is invalid beyond this
PY_DATETIME_LIMIT_MS = 253_402_300_800_000  # 10000-01-01: datetime cannot hold it
NAN_PAYLOAD = 0xFFFF_FFFF_FFFF_FFFF  # the largest uint64: a negative quiet NaN with every payload bit set
PLUS_INF = 0x7FF0_0000_0000_0000
MINUS_ZERO = 0x8000_0000_0000_0000
HARDWARE = ("<b>" + "x" * 250 + "</b>")[:256]  # 256 printable ASCII characters, markup included
BACKEND = "<i>" + "B" * 25 + "</i>"  # 32
ENGINE = "<script>window.__pwned=9</script>" + "e" * 31  # 64
LABEL = "\u202eevil\u202c \u200bzero\u200b width \u0645\u0631\u062d\u0628\u0627 e\u0301 " + "<b>label</b> " * 20
CHECKPOINT_TIME = MAX_INT63 - 1  # a witness's cosignature timestamp, in seconds: its largest
PEER_SIZE = MAX_INT63 - 1  # a peer's checkpoint size: the largest SQLite holds (the format allows < 2^64)


def _sign(n: int, step: int, verdict: str = "match", **changes) -> bytes:
    identity = key(n)
    findings = changes.pop("findings", None)
    subject = changes.pop("subject", "step")
    record = make_record(identity, step=step, verdict=verdict, run=EXTREME, findings=findings, subject=subject)
    fields = {"hardware": HARDWARE, "backend": BACKEND, "engine_version": ENGINE, "arithmetic_version": 2**32 - 1}
    return sign_attestation(identity, dataclasses.replace(record, **{**fields, **changes})).encoded


def extreme_records() -> list[bytes]:
    """The last step: a match at the largest time, a loss mismatch between an infinite claim and a NaN, an
    error at time 0; step 0: a time just past JavaScript's range, one past Python's, a -0.0 loss; the
    initial state at the largest time; an equivocation at the last step."""
    inf_claim = {"claimed_loss_bits": PLUS_INF, "observed_loss_bits": PLUS_INF}
    return [
        _sign(201, LAST_STEP, time_ms=MAX_TIME_MS, **inf_claim),
        _sign(
            202,
            LAST_STEP,
            "mismatch",
            findings=("loss",),
            time_ms=0,
            claimed_loss_bits=PLUS_INF,
            observed_loss_bits=NAN_PAYLOAD,
        ),  # fmt: skip
        _sign(203, LAST_STEP, "error", time_ms=0, claimed_loss_bits=PLUS_INF),
        _sign(204, 0, time_ms=JS_DATE_LIMIT_MS + 1, claimed_loss_bits=MINUS_ZERO, observed_loss_bits=MINUS_ZERO),
        _sign(205, 0, time_ms=PY_DATETIME_LIMIT_MS),
        _sign(201, 0, subject="init", time_ms=MAX_TIME_MS),
        _sign(206, LAST_STEP, time_ms=MAX_TIME_MS - 1, **inf_claim),
        _sign(206, LAST_STEP, "mismatch", findings=("state",), time_ms=MAX_TIME_MS, **inf_claim),
    ]


def build_extreme_ledger(directory: Path) -> Path:
    """The ledger of extreme_records() for a 2^32-step run, checkpointed and cosigned at the largest time."""
    path = directory / "extreme.db"
    owner = key(200)
    witness = CosignatureSigner("witness.extreme", key(207).private_key)
    with AttestationStore.open(path, origin_for(owner.public_key)) as store:
        store.register_run(EXTREME, MAX_RUN_STEPS, LABEL, key(208).public_key)
        store.append_many(extreme_records())
        note = store.checkpoint(owner)
        body = note.split("\n\n")[0] + "\n"
        cosignature = verify_cosignature(note, witness.cosign(body, CHECKPOINT_TIME), witness.verifier)
        with store.ledger.transaction() as tx:
            insert_cosignature(tx.conn, RECEIVED, cosignature, note)
        peer = NoteSigner("peer.extreme", key(209).private_key)
        for root in (b"\x01" * 32, b"\x02" * 32):  # two roots at the largest size: a split view
            store.ledger.add_peer_checkpoint(
                sign_checkpoint(Checkpoint("peer.extreme", PEER_SIZE, root), peer), peer.verifier, []
            )
    return path
