"""A js-libp2p peer (another libp2p implementation) against p2paudit daemons running as real processes.

The peer (tests/interop/js/peer.mjs) is written from docs/network.md and docs/attestation.md: it dials
node-0 over Noise + yamux, joins the run's gossipsub topic, verifies every gossiped attestation in
JavaScript (canonical msgpack, Ed25519 under the attestation domain), waits for node-1's attestations
(node-1 starts once the peer is in node-0's mesh, so they reach it through node-0), publishes an
attestation it built and signed itself, and pages through node-0's log on /p2paudit/sync/1.0.0, checking
the signed checkpoint note and every page's RFC 9162 range proof. Here we check what it reports against
the daemons' ledgers, opened read-only.

Skipped only when tests/interop/js/node_modules is missing and CI is unset (`npm ci` in that directory,
as scripts/install.sh does, installs it); under CI a missing install fails.
"""

from __future__ import annotations

import json
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from p2paudit.attest.record import decode_signed
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.audit.replay import open_run
from p2paudit.identity import ensure_node_identity, identity_from_seed, peer_id_of
from p2paudit.node.localnet import LocalNet, NodeSpec, start_network, start_node, stop, wait_listening
from p2paudit.run.publisher import TrainPlan, publish_run
from tests.ci_gate import skip_or_fail

JS_DIR = Path(__file__).parent / "js"
PUBLISHER = identity_from_seed(b"\x66" * 32)
JS_SEED = bytes(range(32))  # the JS peer's Ed25519 seed
STEPS = 4
JS_STEP = 2  # the step the JS peer attests
JS_DEADLINE = 50  # seconds; the peer stops by itself by then (plus a 10 s watchdog)


def _require_js() -> str:
    """The node binary, once the npm install is there; skip (no CI) or fail (CI) without it."""
    if not (JS_DIR / "node_modules").is_dir():
        message = f"{JS_DIR}/node_modules is missing: run `npm ci` in {JS_DIR} (scripts/install.sh does)"
        skip_or_fail("the js-libp2p interop test", message)
    node = shutil.which("node")
    if node is None:
        pytest.fail("node_modules is installed but there is no `node` on PATH")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    if int(version.lstrip("v").split(".")[0] or 0) < 20:
        pytest.fail(f"the JS peer needs Node.js 20 or newer, `node --version` says {version!r}")
    return node


def _lines(stream, into: queue.Queue) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _tail(path: Path, chars: int = 2500) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(none)"


def _next_json(lines: queue.Queue, event: str, timeout: float, why: Callable[[], str]) -> dict:
    """The next stdout line of the peer that is a JSON object with this event; fail with `why()` if none."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if value.get("event") == event:
            return value
    raise AssertionError(f"the JS peer printed no {event!r} line within {timeout:.0f} s\n{why()}")


def _ledger(home: Path) -> tuple[set[bytes], AttestationStore]:
    store = AttestationStore.open_readonly(home / "ledger.db")
    report = store.ledger.verify()
    assert report.ok, f"the ledger in {home} does not verify: {report.problems[:1]}"
    return {bytes(e) for e in store.ledger.entries()}, store


def _wait_held(home: Path, entry: bytes, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held, store = _ledger(home)
        store.close()
        if entry in held:
            return True
        time.sleep(0.5)
    return False


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_js_libp2p_peer_verifies_gossip_and_sync_and_its_attestation_is_stored(tmp_path):
    node_bin = _require_js()
    run_dir = tmp_path / "run"
    # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
    publish_run(TrainPlan(run_dir, "tiny", steps=STEPS, ckpt_every=2, backend="reference", arithmetic=1), PUBLISHER)
    run_id = open_run(run_dir).manifest.run_id
    specs = tuple(NodeSpec(f"node-{i}", tmp_path / f"node-{i}") for i in range(2))
    keys = [ensure_node_identity(spec.home)[0].public_key for spec in specs]
    js_key = identity_from_seed(JS_SEED).public_key
    config = {
        "run_id": run_id.hex(),
        "manifest": str(run_dir / "manifest.json"),
        "seed": JS_SEED.hex(),
        "step": JS_STEP,
        "expect_verifiers": [keys[1].hex()],  # node-1's gossip reaches the peer only through node-0
        "min_gossip": 1,
        "page_size": 3,  # several range requests, most with hashes on both sides of the page
        "min_entries": 5,  # ... so the log it pages through must outgrow one page, however slow the replays
        "deadline_s": JS_DEADLINE,
    }
    stderr = tmp_path / "js-peer.stderr"
    lines: queue.Queue = queue.Queue()
    net: LocalNet = start_network(specs[:1], run_dir, backend="reference", redundancy=2)
    peer = None

    def why() -> str:
        logs = "".join(f"\n--- {name} log:\n{_tail(log)}" for name, log in net.logs.items())
        return f"--- JS peer stderr:\n{_tail(stderr)}{logs}"

    began = time.monotonic()
    try:
        config["daemon"] = wait_listening(net, "node-0")
        (tmp_path / "js-peer.json").write_text(json.dumps(config))
        with open(stderr, "wb") as err:
            peer = subprocess.Popen(
                [node_bin, str(JS_DIR / "peer.mjs"), str(tmp_path / "js-peer.json")],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                cwd=JS_DIR,
            )
        threading.Thread(target=_lines, args=(peer.stdout, lines), daemon=True).start()
        ready = _next_json(lines, "ready", 40, why)
        assert ready["peer_id"] == peer_id_of(js_key)
        # node-1 aims at 3 checks a step, so it replays every step and gossips for a few seconds: a batch it
        # flushes before its mesh has formed is lost (py-libp2p sends nothing on a subscribed, empty mesh).
        start_node(net, specs[1], run_dir, config["daemon"], "reference", 3)
        summary = _next_json(lines, "summary", JS_DEADLINE + 15, why)
        (tmp_path / "js-summary.json").write_text(json.dumps(summary, indent=1))
        code = peer.wait(timeout=15)
        assert code == 0, f"the JS peer failed with exit code {code}\n{why()}"
        own = bytes.fromhex(summary["published"]["envelope"])
        # node-1 holds it too: forwarded by node-0's gossip, or synced from node-0's log.
        node1_has_it = _wait_held(specs[1].home, own, 30)
    finally:
        if peer is not None and peer.poll() is None:
            peer.kill()
            peer.wait()
        stop(net)
    elapsed = time.monotonic() - began

    # What the JS peer verified, in JavaScript.
    gossip, sync = summary["gossip"], summary["sync"]
    assert gossip["rejected"] == 0
    assert gossip["attestations_verified"] >= 1 and gossip["batches_verified"] >= 1
    assert gossip["attestations_verified"] == sum(gossip["by_verifier"].values())
    assert set(gossip["by_verifier"]) <= {keys[0].hex(), keys[1].hex()}
    assert gossip["by_verifier"].get(keys[1].hex(), 0) >= 1  # two hops: node-1 -> node-0 -> JS
    assert summary["connection"]["encryption"] == "/noise"
    assert summary["connection"]["multiplexer"] == "/yamux/1.0.0"
    meshsub = [p for p in summary["connection"]["protocols"] if p.startswith("/meshsub/")]
    assert meshsub, summary["connection"]["protocols"]
    assert sync["runs"] == [[run_id.hex(), STEPS]]
    checkpoint = sync["checkpoint"]
    assert checkpoint["origin"] == origin_for(keys[0])
    assert sync["status_requests"] >= 1 and sync["pages_verified"] >= 2
    assert sync["entries_verified"] >= checkpoint["size"] >= 1
    assert sync["proof_hashes"] >= 1
    assert 0 <= sync["own_index"] < checkpoint["size"]
    tampered = ("forged_attestation_refused", "non_canonical_attestation_refused", "flipped_entry_refused")
    tampered += ("shifted_index_refused", "forged_note_refused")
    assert summary["self_tests"] == dict.fromkeys(tampered, True)

    # What the daemons stored: the peer's exact bytes, signed by its key, for the step it named.
    held, store = _ledger(specs[0].home)
    try:
        assert own in held
        record = decode_signed(own).attestation
        assert (record.verifier, record.run_id, record.step, record.verdict) == (js_key, run_id, JS_STEP, "match")
        assert store.ledger.entry(sync["own_index"]) == own
        assert store.ledger.root(checkpoint["size"]).hex() == checkpoint["root"]
        old_head = sync["old_head"]  # a page proved under a head signed before the peer's attestation
        assert 1 <= old_head["size"] <= sync["own_index"] < checkpoint["size"]
        assert store.ledger.root(old_head["size"]).hex() == old_head["root"]
        by_js = [e for e in held if decode_signed(e).attestation.verifier == js_key]
        assert by_js == [own]
    finally:
        store.close()
    assert node1_has_it, "node-1 never held the JS peer's attestation"
    log0 = net.logs["node-0"].read_text(errors="replace")
    js_peer = peer_id_of(js_key)[:16]
    assert not [line for line in log0.splitlines() if js_peer in line and ("banned" in line or "rejected" in line)]
    print(
        f"JS peer: {gossip['attestations_verified']} gossiped attestation(s) verified in {gossip['batches_verified']} "
        f"batch(es), {sync['pages_verified']} page(s) / {sync['entries_verified']} entries proved under a checkpoint "
        f"of size {checkpoint['size']}, own attestation at index {sync['own_index']}, over {meshsub[0]}; "
        f"{elapsed:.1f} s in all"
    )
