"""A ledger made for the explorer's tests: disputes, an equivocation, an init mismatch, a 100,000-step run,
checkpoints with a witness's cosignature, a peer's split view, and markup in every text field a peer controls."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ledger import Checkpoint, NoteSigner, sign_checkpoint
from ledger.cosignature import RECEIVED, CosignatureSigner, insert_cosignature, verify_cosignature
from p2paudit.attest.record import sign_attestation
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.identity import Identity
from tests.attest.attest_helpers import key, make_record

# Printable ASCII only (records allow nothing else): a script, an element with a handler, and a tag to look for.
MARKUP = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2><marquee>x</marquee>"
SHORT_MARKUP = "<marquee>b</marquee>"  # a backend is at most 32 characters
NAME_MARKUP = "<script>window.__pwned=3</script>"  # key names: no spaces, no '+'
SMALL = hashlib.sha256(b"explorer small run").digest()
BIG = hashlib.sha256(b"explorer big run").digest()
BIG_STEPS = 100_000
BIG_EVERY = 25  # the big run: steps 0, 25, 50, ... checked by two keys
BIG_DISPUTED = 99_975
SMALL_DISPUTED = (3, 5)  # step 3: state; step 5: data and loss
SMALL_EQUIVOCATION = 7
OWNER = key(100)
PUBLISHER = key(90)  # signed the small run's manifest
BUSY_PROGRESS = {  # the daemon replays step 4: 40 % done, in its second of four micro-batches, an hour left
    "step": 4,
    "phase": "micro-batch",
    "fraction": 0.4,
    "counts": {
        "micro_batches_done": 1,
        "micro_batches": 4,
        "layers_done": 3,
        "layers": 8,
        "params_done": 0,
        "params": 0,
    },
    "elapsed": 2400.0,
    "eta_seconds": 3600.0,
}


@dataclass(frozen=True)
class Built:
    path: Path
    status_path: Path
    owner: Identity
    witness: CosignatureSigner


def _signed(identity: Identity, run: bytes, step: int, verdict: str = "match", **extra) -> bytes:
    record = make_record(identity, step=step, verdict=verdict, run=run, **extra)
    if identity.public_key == key(3).public_key:
        record = dataclasses.replace(record, hardware=MARKUP, backend=SHORT_MARKUP, engine_version=MARKUP[:64])
    return sign_attestation(identity, record).encoded


def small_run() -> list[bytes]:
    a, b, c, d = key(1), key(2), key(3), key(4)
    items = [_signed(k, SMALL, step) for step in range(10) for k in (a, b)]
    items.append(_signed(c, SMALL, 3, "mismatch"))
    items.append(_signed(c, SMALL, 5, "mismatch", findings=("data", "loss")))
    items.append(_signed(d, SMALL, SMALL_EQUIVOCATION, time_ms=1_700_000_000_001))
    items.append(_signed(d, SMALL, SMALL_EQUIVOCATION, "mismatch", time_ms=1_700_000_000_002))
    items.append(_signed(a, SMALL, 0, subject="init"))
    items.append(_signed(c, SMALL, 0, "mismatch", subject="init"))
    return items


def big_run() -> list[bytes]:
    a, b, c = key(1), key(2), key(3)
    items = [_signed(k, BIG, step) for step in range(0, BIG_STEPS, BIG_EVERY) for k in (a, b)]
    items.append(_signed(c, BIG, BIG_DISPUTED, "mismatch"))
    return items


def _witness_and_peers(store: AttestationStore, witness: CosignatureSigner) -> None:
    note = store.ledger.latest_checkpoint()
    body = note.split("\n\n")[0] + "\n"
    cosignature = verify_cosignature(note, witness.cosign(body, 1_764_000_000), witness.verifier)
    with store.ledger.transaction() as tx:
        insert_cosignature(tx.conn, RECEIVED, cosignature, note)
    peer = NoteSigner("peer.example/" + NAME_MARKUP, key(50).private_key)
    for root in (b"\x01" * 32, b"\x02" * 32):  # one size, two roots: a split view
        cp = Checkpoint("peer.example/" + NAME_MARKUP, 5, root)
        store.ledger.add_peer_checkpoint(sign_checkpoint(cp, peer), peer.verifier, [])


def write_status(path: Path, owner: Identity) -> None:
    status = {
        "format": "p2paudit-status",
        "version": 1,
        "pid": os.getpid(),
        "written_at": time.time(),
        "peer_id": "12D3KooWTest",
        "public_key": owner.public_key.hex(),
        "listen": ["/ip4/127.0.0.1/tcp/4001"],
        "peers": ["12D3KooWPeerOne", MARKUP],
        "bans": [{"peer": "12D3KooWBad", "reason": MARKUP, "until": time.time() + 600}],
        "sync": [
            {"peer": "12D3KooWPeerOne", "state": "ok", "last_ok": time.time() - 5, "next_try": None, "error": None},
            {
                "peer": "12D3KooWBad",
                "state": "backing-off",
                "last_ok": None,
                "next_try": time.time() + 60,
                "error": MARKUP,
            },
        ],
        "ledger": {"path": "ledger.db", "size": 0},
        "audited": 3,
        "received": 9,
        "busy": {"run_id": SMALL.hex(), "step": 4, "progress": BUSY_PROGRESS},
        "runs": [
            {
                "run_id": SMALL.hex(),
                "label": MARKUP,
                "steps": 20,
                "checked_once": 10,
                "checked_r": 10,
                "redundancy": 2,
                "disputes": 2,
            }
        ],
        "equivocations": 1,
        "events": ["sync ok", MARKUP],
        "health": {"longest_stall_ms": 1.5, "stall_task": MARKUP, "store_jobs": 4, "busiest_store_job_ms": 2.0},
    }
    path.write_text(json.dumps(status))


def build_ledger(directory: Path) -> Built:
    """The test ledger (about 8,000 attestations, a few seconds to sign and store)."""
    path = directory / "ledger.db"
    witness = CosignatureSigner("witness." + NAME_MARKUP, key(60).private_key)
    with AttestationStore.open(path, origin_for(OWNER.public_key)) as store:
        store.register_run(SMALL, 20, "small " + MARKUP, PUBLISHER.public_key)
        store.register_run(BIG, BIG_STEPS, "big")  # made known by its id alone: its publisher is unknown
        small, big = small_run(), big_run()
        store.append_many(small)
        store.checkpoint(OWNER)
        for at in range(0, len(big), 4000):
            store.append_many(big[at : at + 4000])
        store.checkpoint(OWNER)
        _witness_and_peers(store, witness)
    status_path = directory / "status.json"
    write_status(status_path, OWNER)
    return Built(path, status_path, OWNER, witness)
