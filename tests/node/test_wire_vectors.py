"""Test vectors for every message of docs/network.md: its bytes in hex and its decoded fields.

The vectors live in docs/network-vectors.json, for implementers in other languages. Every input here is
deterministic (seeded Ed25519 keys sign deterministically; times are fixed), so the messages are
rebuilt with our encoders and must equal the file byte for byte, and every file entry must decode to
its fields with our decoders. The answers a node gives (the reconcile summaries, hashes and entries,
the witness's cosignature) are the answers of the real handlers over a real store holding the
vectors' attestations, so they follow the rules they illustrate. The file also holds the test-only
Ed25519 seeds of its keys: every signature in it is made again from those seeds alone. Regenerate
after a deliberate format change with `P2PAUDIT_WRITE_VECTORS=1 pytest tests/node/test_wire_vectors.py`
and review the diff.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from hashlib import sha256
from pathlib import Path
from typing import Any

from node_helpers import RUN, key, record

from ledger.cosignature import CosignatureSigner
from ledger.merkle import leaf_hash
from ledger.note import Checkpoint, NoteSigner, parse_note, sign_checkpoint
from p2paudit.attest.record import decode_signed, sign_attestation
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.identity import identity_from_seed, peer_id_of
from p2paudit.node import wire
from p2paudit.node.net._peers import decode_peer_list, encode_peer_list, encode_peer_refusal
from p2paudit.node.protocols import reconcile
from p2paudit.node.protocols.announce import (
    decode_announcement,
    decode_list,
    encode_list,
    encode_list_request,
    sign_announcement,
)
from p2paudit.node.protocols.witness import Witness, witness_checkpoint, witness_signer
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


KEYS = (1, 2, 3)  # node_helpers.key(n): the keys every vector is signed with
TEST_KEYS = "test keys (TEST ONLY: private, published, never use them for anything else)"


def _seed(n: int) -> bytes:
    return sha256(b"node test key %d" % n).digest()  # node_helpers.key's seed


def build() -> dict[str, dict[str, Any]]:
    """Every message kind, built from fixed inputs with our encoders: name -> {hex, decoded, note}."""
    with tempfile.TemporaryDirectory() as home:
        return _build(Path(home))


def _build(home: Path) -> dict[str, dict[str, Any]]:
    assert all(identity_from_seed(_seed(n)).public_key == key(n).public_key for n in KEYS)
    a = sign_attestation(key(1), record(key(1), 3, "match", time_ms=1_764_000_000_000)).encoded
    b = sign_attestation(key(2), record(key(2), 3, "mismatch", time_ms=1_764_000_000_001)).encoded
    entries = (a, b)
    empty_root = bytes.fromhex("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    note = _node_note(1, 0, empty_root)
    out: dict[str, dict[str, Any]] = {}

    def add(name: str, data: bytes, decoded: Any, note_text: str = "") -> None:
        out[name] = {"hex": data.hex(), "decoded": _hex(decoded), "note": note_text}

    out[TEST_KEYS] = {
        "hex": "",
        "decoded": {
            f"key {n}": {
                "seed": _seed(n).hex(),
                "public_key": key(n).public_key.hex(),
                "peer_id": peer_id_of(key(n).public_key),
            }
            for n in KEYS
        },
        "note": "Ed25519 private keys as RFC 8032 32-byte seeds, made public so that every signature here can be "
        "made again, not only checked: key 1 signs the attestation 'a' (match), the checkpoint note and the run "
        "announcement; key 2 the attestation 'b' (mismatch) and, as witness, the cosignature; key 3 is only a "
        "peer id. Anything signed by these keys proves nothing.",
    }
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
    # The answer of a real witness (key 2) to that request, at a fixed time.
    witness_store = AttestationStore.open(home / "witness.db", origin_for(key(2).public_key))
    try:
        signer = witness_signer(key(2), origin_for(key(2).public_key))
        answer = witness_checkpoint(Witness(witness_store.ledger, signer), wire.encode_witness_request(request),
                                    now=COSIGNED_AT)  # fmt: skip
    finally:
        witness_store.close()
    add("witness response (cosigned)", answer, wire.decode_witness_response(answer),
        "text: one C2SP tlog-cosignature line with its final newline: U+2014, space, the witness name "
        "p2paudit.dev/witness/<peer id>, space, base64(key id || u64be timestamp || Ed25519 signature), 0x0A; key "
        "id SHA-256(name || 0x0A || 0x04 || key)[:4]; signed message 'cosignature/v1\\ntime <t>\\n' + the "
        "checkpoint text (origin, size and root lines, without the blank line and the note's signatures)")  # fmt: skip
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
    _add_reconcile(add, home, a, b)
    add("checkpoint note (empty log)", note.encode(), {"origin": note.split("\n")[0], "size": 0, "root": empty_root},
        "C2SP signed note (UTF-8 bytes); key id SHA-256(name || 0x0A || 0x01 || key)[:4]")  # fmt: skip
    return out


def _add_reconcile(add, home: Path, a: bytes, b: bytes) -> None:
    """One reconciliation of a 4-step run (steps -1..3), every answer the real handler's (reconcile.serve) over
    a store that holds attestations a and b of step 3; the asking client holds only b."""
    server = AttestationStore.open(home / "server.db", origin_for(key(3).public_key))
    try:
        server.register_run(RUN, 4, "test")
        server.append_many([a, b])

        def exchange(name: str, request, what: str, explain: str = "") -> None:
            data = reconcile.encode_request(request)
            answer = reconcile.serve(server, data)
            add(f"reconcile {name} request", data, request, explain)
            add(f"reconcile {name}", answer, {what: reconcile.decode_answer(answer, what)})

        whole = reconcile.fingerprints(server, RUN, -1, 3, 1)[0][1].hex()[:16]
        exchange("summary (whole run)", reconcile.Summary(RUN, -1, 3, 1), "summary",
                 "the first request of every sync: one bucket over steps -1..num_steps-1 (here 4 steps, -1..3); "
                 f"the client's own pair is [1, sha256(leaf(b))], the server's [2, {whole}..]: they differ")  # fmt: skip
        exchange("summary", reconcile.Summary(RUN, -1, 3, 2), "summary",
                 "steps -1..3 (n = 5) in 2 buckets: width ceil(5/2) = 3, so buckets -1..1 and 2..3; the first is "
                 "empty ([0, SHA-256 of nothing]), the second holds a and b (step 3): fingerprint = SHA-256 of "
                 "their leaf hashes sorted bytewise")  # fmt: skip
        exchange("summary (64 buckets asked)", reconcile.Summary(RUN, -1, 3, 64), "summary",
                 "n = 5 steps in 64 buckets: width ceil(5/64) = 1, so 5 buckets of one step, not 64: a summary has "
                 "ceil(n / width) pairs (the daemon asks for min(64, n))")  # fmt: skip
        exchange("hashes", reconcile.Hashes(RUN, 2, 3), "hashes",
                 "the bucket 2..3 that differs: the server lists its leaf hashes by step, then bytewise")  # fmt: skip
        exchange("entries", reconcile.Entries((leaf_hash(a),)), "entries",
                 "the one leaf hash the client lacks (a's); the answer holds a's envelope")  # fmt: skip
    finally:
        server.close()


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
    for name in ("summary (whole run)", "summary", "summary (64 buckets asked)", "hashes", "entries"):
        request = reconcile.decode_request(v[f"reconcile {name} request"])
        assert _hex(request) == d[f"reconcile {name} request"], name
        (what,) = d[f"reconcile {name}"]
        items = reconcile.decode_answer(v[f"reconcile {name}"], what)
        assert _hex([list(i) if isinstance(i, tuple) else i for i in items]) == d[f"reconcile {name}"][what], name


def test_every_signature_in_the_vectors_is_made_again_from_the_test_keys_in_the_file():
    """Signatures made from the file's own seeds alone (nothing of node_helpers) equal the file's bytes."""
    vectors = json.loads(VECTORS.read_text())
    keys = {name: identity_from_seed(bytes.fromhex(k["seed"])) for name, k in vectors[TEST_KEYS]["decoded"].items()}
    for name, identity in keys.items():
        listed = vectors[TEST_KEYS]["decoded"][name]
        assert (identity.public_key.hex(), peer_id_of(identity.public_key)) == (listed["public_key"], listed["peer_id"])
    by_key = {identity.public_key: identity for identity in keys.values()}
    v = {name: bytes.fromhex(item["hex"]) for name, item in vectors.items()}
    made = 0
    # Attestation envelopes, wherever they appear (alone, in a batch, evidence, a sync page, reconcile entries).
    envelopes = [v["signed attestation envelope"], *wire.decode_batch(v["gossip batch"]).envelopes]
    evidence = wire.decode_evidence(v["evidence (dispute)"])
    envelopes += [evidence.first, evidence.second, *wire.decode_sync_response(v["sync page"]).entries]
    envelopes += reconcile.decode_answer(v["reconcile entries"], "entries")
    for envelope in envelopes:
        attestation = decode_signed(envelope).attestation
        assert sign_attestation(by_key[attestation.verifier], attestation).encoded == envelope
        made += 1
    # The checkpoint note, alone and inside the status answer and the witness request.
    notes = [v["checkpoint note (empty log)"].decode(), wire.decode_sync_response(v["sync status (empty log)"]).note]
    notes.append(wire.decode_witness_request(v["witness request"]).note)
    for text in notes:
        checkpoint = Checkpoint.from_body(parse_note(text).text)
        signer = by_key[wire.origin_public_key(checkpoint.origin)]
        assert sign_checkpoint(checkpoint, NoteSigner(checkpoint.origin, signer.private_key)) == text
        made += 1
    # The witness's cosignature on that note: same name, same time, same key gives the same line.
    line = wire.decode_witness_response(v["witness response (cosigned)"]).text
    name, blob = line.removeprefix("\u2014 ").rstrip("\n").split(" ")
    timestamp = int.from_bytes(base64.b64decode(blob)[4:12], "big")
    witness = by_key[wire.origin_public_key(wire.ORIGIN_PREFIX + name.rsplit("/", 1)[1])]
    body = parse_note(notes[2]).text
    assert CosignatureSigner(name, witness.private_key).cosign(body, timestamp) == line
    made += 1
    # The run announcement, alone and in the announcements answer.
    for data in (v["run announcement"], *decode_list(v["announcements answer"])):
        a = decode_announcement(data)
        assert sign_announcement(by_key[a.publisher], a.run_id, list(a.urls), a.time_ms) == data
        made += 1
    assert made == 14
