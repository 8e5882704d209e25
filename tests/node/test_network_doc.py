"""docs/network.md's fixed statements held to the code, so the document cannot drift from the daemon again.

A js-libp2p peer written from the document alone found it wrong in places (issue 19 item 8): the
number of reconcile buckets a summary holds, the reconcile request limit, the cosignature text, the
manifest's field names, the order of answers. Each test reads the document (its tables, its worked
examples) and checks what it says against the code that serves it: the real handlers a daemon
registers on a real node, the real reconcile handler over a real store, the vectors file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import tempfile
import types
from pathlib import Path

import trio
from node_helpers import RUN, key, open_store, signed

from ledger.merkle import leaf_hash
from ledger.note import Checkpoint, NoteSigner, sign_checkpoint
from p2paudit.attest.codec import MAX_SIGNED_SIZE
from p2paudit.attest.record import decode_signed
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.identity import identity_from_seed
from p2paudit.node import wire
from p2paudit.node.daemon import run as daemon_run
from p2paudit.node.daemon.follow import AnnouncementStore
from p2paudit.node.net import NodeConfig, ReachConfig, open_node
from p2paudit.node.net._requests import Handler
from p2paudit.node.protocols import announce, reconcile
from p2paudit.node.protocols.witness import Witness, witness_checkpoint, witness_signer
from p2paudit.run.manifest import MANIFEST_FILE, SIGNATURE_FILE, sign_body
from p2paudit.run.manifest_body import BODY_KEYS

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "network.md").read_text()
VECTORS = json.loads((ROOT / "docs" / "network-vectors.json").read_text())


def _table(heading: str) -> dict[str, list[str]]:
    """The markdown table after the first line of the doc that contains `heading`: first cell -> the others."""
    lines = DOC[DOC.index(heading) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = cells[1:]
    return rows


def _number(text: str) -> float:
    return float(text.replace(",", ""))


# -- reconcile buckets ------------------------------------------------------------------------------------------


def _doc_buckets(first: int, last: int, buckets: int) -> list[tuple[int, int]]:
    """The ranges as docs/network.md ("Buckets") defines them, written from its text."""
    n = last - first + 1
    w = math.ceil(n / buckets)
    return [(first + i * w, min(first + (i + 1) * w - 1, last)) for i in range(math.ceil(n / w))]


def test_the_bucket_rule_the_doc_states_is_the_codes_for_every_short_and_long_range():
    text = " ".join(DOC.split())
    assert "width w = ceil(n / buckets)" in text and "That makes ceil(n / w) ranges" in text, "the rule moved"
    for first in (-1, 0, 7):
        for n in range(1, 300):
            for buckets in range(1, reconcile.MAX_BUCKETS + 1):
                want = reconcile.bucket_bounds(first, first + n - 1, buckets)
                assert _doc_buckets(first, first + n - 1, buckets) == want, (first, n, buckets)


def test_the_docs_worked_bucket_counts_are_what_an_honest_daemon_answers(tmp_path):
    examples = re.findall(r"(\d+)\s+steps in (\d+) buckets are (\d+) buckets \([^)]*?w\s+=\s+(\d+)\)", DOC)
    assert len(examples) >= 4, "docs/network.md lost its worked bucket counts"
    store = AttestationStore.open(tmp_path / "l.db", origin_for(key(1).public_key))
    try:
        store.register_run(RUN, 1000, "test")
        store.append_many([signed(key(1), 0).encoded])
        for steps, asked, count, width in ((int(x) for x in example) for example in examples):
            request = reconcile.encode_request(reconcile.Summary(RUN, -1, steps - 2, asked))
            pairs = reconcile.decode_answer(reconcile.serve(store, request), "summary")
            bounds = reconcile.bucket_bounds(-1, steps - 2, asked)
            assert (len(pairs), bounds[0][1] - bounds[0][0] + 1) == (count, width), (steps, asked)
    finally:
        store.close()


def test_the_docs_short_run_example_is_what_the_daemon_asks_and_gets():
    """A run of 8 steps (steps -1..7): the daemon asks for 9 buckets; asked for 64, a server answers 9 pairs."""
    assert "min(64, n) buckets" in DOC and "steps -1..num_steps - 1" in DOC
    assert min(reconcile.MAX_BUCKETS, 9) == 9 and len(_doc_buckets(-1, 7, 64)) == 9


# -- the limits tables ------------------------------------------------------------------------------------------


def test_the_wire_limits_table_is_the_codes():
    rows = {name: cells[0] for name, cells in _table("| limit | value |").items()}
    want = {
        "signed attestation envelope": f"{MAX_SIGNED_SIZE:,} bytes (docs/attestation.md)",
        "gossip batch": f"1..{wire.MAX_BATCH} envelopes, {wire.MAX_BATCH_BYTES:,} bytes encoded",
        "checkpoint note in any message": f"{wire.MAX_NOTE_BYTES:,} bytes (UTF-8)",
        "evidence message": f"{wire.MAX_EVIDENCE_BYTES:,} bytes",
        "status response": f"{wire.MAX_RUNS:,} runs",
        "sync page": f"1..{wire.MAX_PAGE} entries, {wire.MAX_PAGE_BYTES:,} bytes encoded",
        "range-proof hashes": f"{wire.MAX_PROOF_HASHES} per side",
        "sync request": f"{wire.MAX_SYNC_REQUEST_BYTES} bytes",
        "consistency proof (witness)": f"{wire.MAX_PROOF_HASHES} hashes (C2SP allows 63)",
        "witness request / response": f"{wire.MAX_WITNESS_REQUEST_BYTES:,} / {wire.MAX_WITNESS_RESPONSE_BYTES:,} bytes",
        "reconcile request / answer": f"{reconcile.MAX_REQUEST_BYTES:,} / {reconcile.MAX_ANSWER_BYTES:,} bytes",
        "reconcile summary / hashes / entries": (
            f"{reconcile.MAX_BUCKETS} buckets / {reconcile.MAX_HASHES:,} hashes / {reconcile.MAX_ENTRIES} entries"
        ),
        "run announcement": (
            f"{announce.MAX_ANNOUNCE_BYTES:,} bytes, 1..{announce.MAX_URLS} URLs of at most "
            f"{announce.MAX_URL_CHARS} characters"
        ),
        "refusal reason": f"{wire.MAX_TEXT} characters",
    }
    assert rows == want


def _served_handlers() -> dict[str, Handler]:
    """The request handlers a daemon's node serves: the adapter's own and those daemon_run registers."""

    async def answer(peer: str, request: bytes) -> bytes:
        return b""

    placeholders = types.SimpleNamespace(
        peers=types.SimpleNamespace(serve_sync=answer, serve_witness=answer, serve_reconcile=answer),
        serve_settled=answer,
        follower=types.SimpleNamespace(serve=answer),
    )
    found: dict[str, Handler] = {}

    async def main() -> None:
        quiet = NodeConfig(reach=ReachConfig(dialback=False, hole_punch=False))
        async with open_node(identity_from_seed(b"\x61" * 32), quiet) as node:
            daemon_run._serve(node, placeholders)
            for protocol, handler in node.host.get_mux().handlers.items():
                registered = getattr(handler, "args", ())
                if registered and isinstance(registered[0], Handler):
                    found[str(protocol)] = registered[0]

    trio.run(main)
    return found


def test_the_request_protocols_limits_table_is_what_a_daemon_serves():
    rows = _table("| protocol | request (bytes) | answer (bytes) | handler time (s) | at once per peer |")
    served = _served_handlers()
    assert set(rows) == set(served), "the table and the served request protocols differ"
    for protocol, handler in served.items():
        shown = tuple(_number(cell) for cell in rows[protocol])
        want = (handler.max_request, handler.max_response, handler.timeout, handler.max_concurrent_per_peer)
        assert shown == want, protocol
    assert f"is at most {wire.MAX_STATUS_BYTES:,} bytes" in " ".join(DOC.split())


# -- the reconcile vectors follow the rules they illustrate ---------------------------------------------------


def _vector(name: str):
    return bytes.fromhex(VECTORS[name]["hex"])


def test_the_reconcile_vectors_follow_the_rules_they_illustrate():
    held = wire.decode_batch(_vector("gossip batch")).envelopes  # the server's attestations: a and b
    steps = {leaf_hash(e): decode_signed(e).attestation.step for e in held}
    client = {leaf_hash(held[1])}  # the client holds b only

    def pairs(first: int, last: int, buckets: int, hashes) -> list[tuple[int, bytes]]:
        out = []
        for a, b in _doc_buckets(first, last, buckets):
            inside = sorted(h for h in hashes if a <= steps[h] <= b)
            out.append((len(inside), hashlib.sha256(b"".join(inside)).digest()))
        return out

    summaries = {}
    for name in ("summary (whole run)", "summary", "summary (64 buckets asked)"):
        request = reconcile.decode_request(_vector(f"reconcile {name} request"))
        answer = reconcile.decode_answer(_vector(f"reconcile {name}"), "summary")
        assert answer == pairs(request.first, request.last, request.buckets, steps), name
        summaries[name] = (request, answer)
    whole, _ = summaries["summary (whole run)"]
    assert (whole.first, whole.buckets) == (-1, 1)
    two, answer = summaries["summary"]
    differing = [
        bounds
        for bounds, theirs, mine in zip(
            _doc_buckets(two.first, two.last, two.buckets), answer, pairs(two.first, two.last, two.buckets, client)
        )
        if theirs[0] and theirs != mine
    ]
    listed_request = reconcile.decode_request(_vector("reconcile hashes request"))
    assert [(listed_request.first, listed_request.last)] == differing
    listed = reconcile.decode_answer(_vector("reconcile hashes"), "hashes")
    a, b = listed_request.first, listed_request.last
    assert listed == sorted((h for h in steps if a <= steps[h] <= b), key=lambda h: (steps[h], h))
    asked = reconcile.decode_request(_vector("reconcile entries request")).hashes
    assert set(asked) == set(listed) - client
    given = reconcile.decode_answer(_vector("reconcile entries"), "entries")
    assert {leaf_hash(e) for e in given} == set(asked)


# -- the order of answers -------------------------------------------------------------------------------------


def test_announcements_are_listed_in_the_order_stored_not_by_their_time():
    assert "in the order it stored them (the oldest of them first), not sorted by\n`time_ms`" in DOC
    with tempfile.TemporaryDirectory() as home:
        store = AttestationStore.open(Path(home) / "l.db", origin_for(key(1).public_key))
        try:
            later = announce.sign_announcement(key(1), RUN, ["https://lab.example/b/"], 2_000)
            earlier = announce.sign_announcement(key(1), RUN, ["https://lab.example/a/"], 1_000)
            for data in (later, earlier):
                assert AnnouncementStore(store).add(announce.decode_announcement(data), data)
            assert AnnouncementStore(store).held([key(1).public_key]) == [later, earlier]
        finally:
            store.close()


# -- the witness's order of checks ----------------------------------------------------------------------------


def test_the_witness_checks_run_in_the_order_the_doc_states(tmp_path):
    text = " ".join(DOC.split())
    assert "The checks run in this order, which is not quite the table's: 1, 2, 3, 4, then 6 for a checkpoint" in text
    assert "then 5, 7 (a size the witness cosigned with another root" in text and "wins over the proof) and 6" in text
    alice, walter = key(1), key(2)
    log = open_store(tmp_path / "alice.db", alice)
    log.append_many([signed(alice, step).encoded for step in range(10)])
    held = open_store(tmp_path / "walter.db", walter)
    try:
        witness = Witness(held.ledger, witness_signer(walter, held.ledger.origin))
        origin = log.ledger.origin

        def ask(old_size: int, size: int, root: bytes, proof: tuple[bytes, ...] = ()) -> int:
            note = sign_checkpoint(Checkpoint(origin, size, root), NoteSigner(origin, alice.private_key))
            request = wire.encode_witness_request(wire.WitnessRequest(old_size, proof, note))
            return wire.decode_witness_response(witness_checkpoint(witness, request, 1_700_000_000)).code

        assert ask(0, 10, log.ledger.root(10)) == wire.WITNESS_OK  # the witness now holds size 10
        other = b"\x07" * 32
        assert ask(0, 0, other) == wire.WITNESS_BAD_PROOF  # 6 for a size-0 root before 5 (old size 0, not 10)
        assert ask(3, 10, other) == wire.WITNESS_OLD_SIZE_MISMATCH  # 5 before 7
        assert ask(10, 10, other) == wire.WITNESS_ROOT_CONFLICT  # 7
        assert ask(10, 12, other, (b"\x00" * 32,)) == wire.WITNESS_BAD_PROOF  # 6 last
    finally:
        held.close()
        log.close()


# -- the cosignature line and the manifest's names ------------------------------------------------------------


def test_the_cosignature_line_is_as_the_doc_writes_it():
    assert '"\\u2014 " name " " base64(key id || u64be timestamp || signature) "\\n"' in DOC
    text = wire.decode_witness_response(_vector("witness response (cosigned)")).text
    assert text.startswith("\u2014 p2paudit.dev/witness/") and text.endswith("\n") and text.count("\n") == 1
    name, blob = text[2:-1].split(" ")
    assert len(base64.b64decode(blob, validate=True)) == 4 + 8 + 64


def test_the_manifest_names_the_doc_uses_are_the_run_formats():
    text = " ".join(DOC.split())
    for phrase in ('the length of the `"steps"` array of its `manifest.json`', 'not `"steps_planned"`',
                   "`manifest.json` and `manifest.sig.json` under it", '`"run_id"` of `manifest.sig.json` as `sha256:<hex>`',
                   '`manifest.sig.json`\'s `"public_key"` is the announcing key, with a valid `"signature"`'):  # fmt: skip
        assert phrase in text, phrase
    assert (MANIFEST_FILE, SIGNATURE_FILE) == ("manifest.json", "manifest.sig.json")
    assert {"steps", "steps_planned"} <= set(BODY_KEYS)
    body_bytes, envelope = sign_body({"steps": []}, key(1))
    assert envelope["run_id"] == "sha256:" + hashlib.sha256(body_bytes).hexdigest()
    assert envelope["public_key"] == key(1).public_key.hex() and len(bytes.fromhex(envelope["signature"])) == 64
