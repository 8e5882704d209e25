"""Test vectors for every message of docs/network.md: its bytes in hex and its decoded fields.

The vectors live in docs/network-vectors.json, for implementers in other languages. Every input here is
deterministic (seeded Ed25519 keys sign deterministically; times are fixed), so the messages are
rebuilt with our encoders and must equal the file byte for byte, and every file entry must decode to
its fields with our decoders. Regenerate after a deliberate format change with
`P2PAUDIT_WRITE_VECTORS=1 pytest tests/node/test_wire_vectors.py` and review the diff.
"""

from __future__ import annotations

import json
import os
from hashlib import sha256
from pathlib import Path
from typing import Any

from node_helpers import RUN, key, record

from ledger.cosignature import CosignatureSigner
from ledger.merkle import leaf_hash
from ledger.note import Checkpoint, NoteSigner, sign_checkpoint
from p2paudit.attest.record import sign_attestation
from p2paudit.identity import peer_id_of
from p2paudit.node import reconcile, wire
from p2paudit.node.announce import decode_announcement, encode_list, encode_list_request, sign_announcement
from p2paudit.node.libp2p_peers import decode_peer_list, encode_peer_list, encode_peer_refusal
from p2paudit.node.wire import PeerRefused

VECTORS = Path(__file__).resolve().parents[2] / "docs" / "network-vectors.json"
COSIGNED_AT = 1_764_000_000  # seconds since the epoch (C2SP tlog-cosignature's unit)


def _hex(value: Any) -> Any:
    """Fields as JSON: bytes as hex strings, tuples as lists, dataclasses as dicts of their fields."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, (list, tuple)):
        return [_hex(v) for v in value]
    if isinstance(value, dict):
        return {k: _hex(v) for k, v in value.items()}
    if hasattr(value, "__dataclass_fields__"):
        return {name: _hex(getattr(value, name)) for name in value.__dataclass_fields__}
    return value


def _node_note(n: int, size: int, root: bytes) -> str:
    identity = key(n)
    origin = wire.ORIGIN_PREFIX + peer_id_of(identity.public_key)
    return sign_checkpoint(Checkpoint(origin, size, root), NoteSigner(origin, identity.private_key))


def build() -> dict[str, dict[str, Any]]:
    """Every message kind, built from fixed inputs with our encoders: name -> {hex, decoded, note}."""
    a = sign_attestation(key(1), record(key(1), 3, "match", time_ms=1_764_000_000_000)).encoded
    b = sign_attestation(key(2), record(key(2), 3, "mismatch", time_ms=1_764_000_000_001)).encoded
    entries = (a, b)
    empty_root = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    note = _node_note(1, 0, empty_root)
    witness_name = wire.ORIGIN_PREFIX.replace("ledger", "witness") + peer_id_of(key(2).public_key)
    cosignature = CosignatureSigner(witness_name, key(2).private_key).cosign(
        note.split("\n\n", 1)[0] + "\n", COSIGNED_AT
    )
    out: dict[str, dict[str, Any]] = {}

    def add(name: str, data: bytes, decoded: Any, note_text: str = "") -> None:
        out[name] = {"hex": data.hex(), "decoded": _hex(decoded), "note": note_text}

    add("signed attestation envelope", a, {"verifier": key(1).public_key, "step": 3, "verdict": "match"},
        "docs/attestation.md: [magic, version, body, verifier key, signature]")  # fmt: skip
    add("gossip message id", wire.message_id(a), {"data": a}, "SHA-256(b'p2paudit/message-id/v1' 0x00 || data)")
    batch = wire.GossipBatch(RUN, entries)
    add("gossip batch", wire.encode_batch(batch), batch)
    evidence = wire.Evidence("dispute", a, b)
    add("evidence (dispute)", wire.encode_evidence(evidence), evidence)
    add("sync status request", wire.encode_sync_request(wire.StatusRequest()), {})
    status = wire.StatusResponse(note, ((RUN, 4),))
    add("sync status (empty log)", wire.encode_sync_response(status), status, "size 0, root = SHA-256('')")
    rng = wire.RangeRequest(2, 0, 2)
    add("sync range request", wire.encode_sync_request(rng), rng)
    page = wire.Page(0, entries, wire.RangeProof((), ()))
    add("sync page", wire.encode_sync_response(page), page, "the whole 2-leaf tree: no proof hashes on either side")
    add("sync refusal", wire.sync_refusal("busy: too many concurrent requests; retry later"),
        wire.SyncRefusal("busy: too many concurrent requests; retry later"))  # fmt: skip
    request = wire.WitnessRequest(0, (), note)
    add("witness request", wire.encode_witness_request(request), request)
    ok = wire.WitnessResponse(wire.WITNESS_OK, 0, cosignature.rstrip("\n"))
    add("witness response (cosigned)", wire.encode_witness_response(ok), ok,
        "text: C2SP tlog-cosignature line; key id SHA-256(name || 0x0A || 0x04 || key)[:4], timestamp in seconds, "
        "signed message 'cosignature/v1\\ntime <t>\\n' + the checkpoint text")  # fmt: skip
    add("witness refusal (code 8)", wire.witness_refusal("timed out after 10.0 s"),
        wire.WitnessResponse(wire.WITNESS_UNAVAILABLE, 0, "timed out after 10.0 s"))  # fmt: skip
    for covered in (False, True):
        add(f"settled ({'covered' if covered else 'not covered'})", wire.encode_settled(covered), {"covered": covered})
    add("settled refusal", wire.settled_refusal("internal error in the serving node"),
        {"reason": "internal error in the serving node"})  # fmt: skip
    peers = [(peer_id_of(key(3).public_key), ["/ip4/127.0.0.1/tcp/4001"])]
    add("peer exchange answer", encode_peer_list(peers), peers)
    add("peer exchange refusal", encode_peer_refusal("busy"), {"reason": "busy"})
    announcement = sign_announcement(key(1), RUN, ["https://lab.example/run/"], 1_764_000_000_000)
    add("run announcement", announcement, decode_announcement(announcement),
        "signature over b'p2paudit/announce/v1' 0x00 + the array without its signature")  # fmt: skip
    add("announcements request", encode_list_request([key(1).public_key]), {"publishers": [key(1).public_key]})
    add("announcements answer", encode_list([announcement]), {"announcements": [announcement]})
    summary = reconcile.Summary(RUN, -1, 3, 2)
    add("reconcile summary request", reconcile.encode_request(summary), summary, "steps -1..3 in 2 buckets")
    fingerprint = sha256(b"".join(sorted([leaf_hash(a), leaf_hash(b)]))).digest()
    buckets = [[2, fingerprint], [0, sha256(b"").digest()]]
    add("reconcile summary", reconcile.encode_answer("summary", buckets), {"buckets": buckets},
        "fingerprint = SHA-256 of the sorted leaf hashes; an empty bucket: SHA-256 of nothing")  # fmt: skip
    hashes = reconcile.Hashes(RUN, 0, 2)
    add("reconcile hashes request", reconcile.encode_request(hashes), hashes)
    add("reconcile hashes", reconcile.encode_answer("hashes", [leaf_hash(a)]), {"hashes": [leaf_hash(a)]})
    wanted = reconcile.Entries((leaf_hash(a),))
    add("reconcile entries request", reconcile.encode_request(wanted), wanted)
    add("reconcile entries", reconcile.encode_answer("entries", [a]), {"entries": [a]})
    add("checkpoint note (empty log)", note.encode(), {"origin": note.split("\n")[0], "size": 0, "root": empty_root},
        "C2SP signed note (UTF-8 bytes); key id SHA-256(name || 0x0A || 0x01 || key)[:4]")  # fmt: skip
    return out


def test_vectors_file_is_what_the_encoders_make():
    built = build()
    if os.environ.get("P2PAUDIT_WRITE_VECTORS"):
        VECTORS.write_text(json.dumps(built, indent=1) + "\n")
    assert json.loads(VECTORS.read_text()) == built


def test_every_vector_decodes_to_its_fields():
    vectors = json.loads(VECTORS.read_text())
    v = {name: bytes.fromhex(item["hex"]) for name, item in vectors.items()}
    d = {name: item["decoded"] for name, item in vectors.items()}
    assert _hex(wire.decode_batch(v["gossip batch"])) == d["gossip batch"]
    assert _hex(wire.decode_evidence(v["evidence (dispute)"])) == d["evidence (dispute)"]
    assert wire.decode_sync_request(v["sync status request"]) == wire.StatusRequest()
    assert _hex(wire.decode_sync_request(v["sync range request"])) == d["sync range request"]
    for name in ("sync status (empty log)", "sync page", "sync refusal"):
        assert _hex(wire.decode_sync_response(v[name])) == d[name], name
    assert _hex(wire.decode_witness_request(v["witness request"])) == d["witness request"]
    for name in ("witness response (cosigned)", "witness refusal (code 8)"):
        assert _hex(wire.decode_witness_response(v[name])) == d[name], name
    assert wire.decode_settled(v["settled (covered)"]) is True
    assert wire.decode_settled(v["settled (not covered)"]) is False
    try:
        wire.decode_settled(v["settled refusal"])
        raise AssertionError("a settled refusal decoded as an answer")
    except PeerRefused as refused:
        assert d["settled refusal"]["reason"] in str(refused)
    assert [list(e) for e in decode_peer_list(v["peer exchange answer"], 64, 8)] == d["peer exchange answer"]
    try:
        decode_peer_list(v["peer exchange refusal"], 64, 8)
        raise AssertionError("a peer-exchange refusal decoded as a list")
    except PeerRefused as refused:
        assert "busy" in str(refused)
    assert wire.message_id(bytes.fromhex(d["gossip message id"]["data"])) == v["gossip message id"]
    assert _hex(decode_announcement(v["run announcement"])) == d["run announcement"]
    assert _hex(reconcile.decode_request(v["reconcile summary request"])) == d["reconcile summary request"]
    assert _hex(reconcile.decode_request(v["reconcile hashes request"])) == d["reconcile hashes request"]
    assert _hex(reconcile.decode_request(v["reconcile entries request"])) == d["reconcile entries request"]
    buckets = reconcile.decode_answer(v["reconcile summary"], "summary")
    assert _hex([list(b) for b in buckets]) == d["reconcile summary"]["buckets"]
    assert _hex(reconcile.decode_answer(v["reconcile entries"], "entries")) == d["reconcile entries"]["entries"]
