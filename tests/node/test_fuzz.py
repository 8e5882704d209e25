"""Fuzzing every protocol a `p2paudit daemon` process offers ("Nothing a peer sends ends the node").

One daemon, a real process on 127.0.0.1 started through p2paudit.node.localnet on a tiny published run,
gets PER_PROTOCOL inputs on each protocol (fuzz_inputs.ALL_PROTOCOLS: gossipsub on three protocol ids,
sync, witness, peer exchange, settled, Kademlia, identify and identify push, ping, and raw TCP for
multistream-select, the Noise handshake and yamux), from fresh Ed25519 identities, one at a time, each
followed by a ping. Passing means: the daemon never exited or stopped answering (a finding restarts it, so
that every protocol is still fuzzed and every way to end it is reported), its status file is fresh at the
end, its resident memory stayed under 2x its size before fuzzing + 200 MiB, and an honest node was served
(a signed sync status, and a published attestation stored) every few seconds during the fuzzing and after.

The inputs are a pure function of SEED; each is recorded with its outcome in fuzz-inputs.jsonl (findings
with their suspects and the daemon's log tail in fuzz-findings.json) under the test's tmp_path, and
`python benchmarks/fuzz_bench.py --replay FILE` sends a recorded file again.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
import trio
from fuzz_cases import make_cases
from fuzz_corpus import build_corpus
from fuzz_inputs import (
    ALL_PROTOCOLS,
    FRAME_LIMITS,
    KILLER_RPC,
    MESHSUB,
    RAW_PROTOCOLS,
    STREAM_PROTOCOLS,
    Case,
    frame_attack,
    load_cases,
    mutate_msgpack,
)
from fuzz_peer import fuzz_daemon
from fuzz_report import FuzzConfig

from p2paudit.identity import identity_from_seed
from p2paudit.node import wire
from p2paudit.run.publisher import TrainPlan, publish_run

PUBLISHER = identity_from_seed(b"\x67" * 32)
STEPS = 2
SEED = 20_260_906
PER_PROTOCOL = 200  # 3,200 inputs in CI, about 60 s; the benchmark sends 10,000 a protocol


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("fuzz") / "run"
    # arithmetic=1: its daemons replay on reference, where v1's fold is 2.5x quicker (nothing here is about it)
    publish_run(TrainPlan(run, "tiny", steps=STEPS, ckpt_every=2, backend="reference", arithmetic=1), PUBLISHER)
    return run


def test_fuzz_inputs_are_a_pure_function_of_the_seed_and_are_recorded_exactly(run_dir, tmp_path):
    corpus = build_corpus(run_dir, tmp_path)
    assert build_corpus(run_dir, tmp_path).seeds == corpus.seeds  # the valid messages are deterministic too
    assert set(corpus.seeds) == set(ALL_PROTOCOLS) == set(STREAM_PROTOCOLS) | set(RAW_PROTOCOLS)
    # Seeds are valid messages of their protocol.
    assert wire.decode_sync_request(corpus.seeds[wire.SYNC_PROTOCOL][0]) == wire.StatusRequest()
    assert wire.decode_witness_request(corpus.seeds[wire.WITNESS_PROTOCOL][0]).old_size == 0
    assert wire.decode_batch(corpus.gossip_data[0]).run_id == corpus.run_id
    for protocol in ALL_PROTOCOLS:
        cases = make_cases(protocol, corpus, SEED, 120)
        assert cases == make_cases(protocol, corpus, SEED, 120), protocol
        assert cases != make_cases(protocol, corpus, SEED + 1, 120), protocol
        assert [c.index for c in cases] == list(range(120))
        kinds = {c.kind.split(":")[0] for c in cases}
        assert {"valid", "random"} <= kinds and len(kinds) >= 5, (protocol, kinds)
    for protocol in MESHSUB:  # the RPC that ended py-libp2p 0.8.1's pubsub comes first
        assert make_cases(protocol, corpus, SEED, 3)[0] == Case(protocol, "killer", 0, KILLER_RPC)
    # The record gives back the exact bytes, small (hex) or large (compressed).
    cases = [c for p in ALL_PROTOCOLS for c in make_cases(p, corpus, SEED, 60)]
    path = tmp_path / "record.jsonl"
    path.write_text("".join(json.dumps({**c.to_json(), "outcome": "x"}) + "\n" for c in cases))
    assert load_cases(path) == cases
    assert load_cases(path, [wire.SYNC_PROTOCOL]) == [c for c in cases if c.protocol == wire.SYNC_PROTOCOL]
    assert any(len(c.data) > 4096 for c in cases)


def test_structured_mutations_stay_canonical_and_frames_lie_in_every_way(run_dir, tmp_path):
    corpus = build_corpus(run_dir, tmp_path)
    rng = random.Random(SEED)
    seed = corpus.seeds[wire.SYNC_PROTOCOL][1]
    for _ in range(200):  # one changed element, re-encoded: canonical msgpack that reaches the checks behind
        _, body = mutate_msgpack(rng, seed)
        try:
            wire.decode_sync_request(body)
        except wire.WireError as exc:
            assert "canonical" not in str(exc), body.hex()
    names = {frame_attack(rng, seed, FRAME_LIMITS[wire.SYNC_PROTOCOL], [seed])[0] for _ in range(300)}
    assert names >= {"short-length", "long-length", "huge-length", "endless-varint", "non-minimal", "two-frames"}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fuzzed_inputs_on_every_protocol_neither_end_nor_wedge_the_daemon(run_dir, tmp_path):
    config = FuzzConfig(per_protocol=PER_PROTOCOL, seed=SEED, daemon_seconds=900.0)
    work = tmp_path / "fuzz"
    report = trio.run(fuzz_daemon, run_dir, work, ALL_PROTOCOLS, config)
    summary = report.summary()
    print(summary)
    failures = report.failures(config)
    replay = f"replay: python benchmarks/fuzz_bench.py --replay {work / 'fuzz-inputs.jsonl'}"
    assert not failures, "\n\n".join([*failures, summary, replay])
    assert {p: s.sent for p, s in report.stats.items()} == dict.fromkeys(ALL_PROTOCOLS, PER_PROTOCOL)
    assert sum(r.ok for r in report.honest if r.phase == "during") >= 3  # served all along, not just once
    recorded = load_cases(work / "fuzz-inputs.jsonl")
    assert len(recorded) == PER_PROTOCOL * len(ALL_PROTOCOLS)
    digest = hashlib.sha256(b"".join(c.data for c in recorded)).hexdigest()
    print(f"inputs sha256 {digest}")
