"""Gossip validation: True only for well-formed, fully signed batches of the topic's run; never raises.
Evidence: provable from the bytes alone."""

import msgpack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from node_helpers import OTHER_RUN, RUN, key, signed

from p2paudit.errors import InputError
from p2paudit.node import wire
from p2paudit.node.wire import Evidence, GossipBatch
from p2paudit.node.wire.validate import check_evidence, validate_gossip

TOPIC = wire.run_topic(RUN)
GOOD = [signed(key(1), step).encoded for step in range(5)]
BATCH = wire.encode_batch(GossipBatch(RUN, tuple(GOOD)))


def _raises(fn, *args):
    try:
        fn(*args)
    except InputError:
        return True
    return False


def test_good_batch_passes():
    assert validate_gossip(TOPIC, BATCH)
    assert validate_gossip(TOPIC, bytearray(BATCH))


def test_each_fault_rejected():
    forged = GOOD[1][:-1] + bytes([GOOD[1][-1] ^ 1])
    other_run = signed(key(1), 9, run=OTHER_RUN).encoded
    cases = {
        "forged signature": wire.encode_batch(GossipBatch(RUN, (GOOD[0], forged))),
        "item of another run": wire.encode_batch(GossipBatch(RUN, (GOOD[0], other_run))),
        "batch of another run": wire.encode_batch(GossipBatch(OTHER_RUN, (other_run,))),
        "trailing byte": BATCH + b"\x00",
        "truncated": BATCH[:-1],
        "not an attestation": wire.encode_batch(GossipBatch(RUN, (b"\x93\x01\x02",))),
        "non-canonical": msgpack.packb([wire.MAGIC_BATCH, 1, RUN, GOOD], use_bin_type=True).replace(
            b"\x01\xc4\x20", b"\xcc\x01\xc4\x20", 1
        ),
        "oversized": b"\x00" * (wire.MAX_BATCH_BYTES + 1),
        "evidence on a run topic": wire.encode_evidence(Evidence("dispute", GOOD[0], GOOD[1])),
        "wrong version": msgpack.packb([wire.MAGIC_BATCH, 2, RUN, GOOD], use_bin_type=True),
    }
    for name, data in cases.items():
        assert validate_gossip(TOPIC, data) is False, name
    assert validate_gossip(wire.run_topic(OTHER_RUN), BATCH) is False
    assert validate_gossip("/p2paudit/run/xyz/v1", BATCH) is False
    assert validate_gossip(TOPIC, "text") is False
    assert validate_gossip(None, None) is False


def test_evidence_checked_from_bytes():
    alice, bob = key(1), key(2)
    match = signed(alice, 3).encoded
    theirs = signed(bob, 3, verdict="mismatch").encoded
    mine_again = signed(alice, 3, verdict="mismatch").encoded
    dispute = wire.encode_evidence(Evidence("dispute", match, theirs))
    equivocation = wire.encode_evidence(Evidence("equivocation", match, mine_again))
    assert check_evidence(dispute) == "dispute"
    assert check_evidence(equivocation) == "equivocation"
    assert validate_gossip(wire.EVIDENCE_TOPIC, dispute) and validate_gossip(wire.EVIDENCE_TOPIC, equivocation)
    not_a_dispute = wire.encode_evidence(Evidence("dispute", match, signed(bob, 3).encoded))
    mislabelled = wire.encode_evidence(Evidence("equivocation", match, theirs))
    other_step = wire.encode_evidence(Evidence("dispute", match, signed(bob, 4, verdict="mismatch").encoded))
    forged = wire.encode_evidence(Evidence("dispute", match, theirs[:-1] + bytes([theirs[-1] ^ 1])))
    for data in (not_a_dispute, mislabelled, other_step, forged):
        assert _raises(check_evidence, data)
        assert validate_gossip(wire.EVIDENCE_TOPIC, data) is False
    assert validate_gossip(wire.EVIDENCE_TOPIC, BATCH) is False


@settings(max_examples=300, deadline=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_fuzzed_bytes_never_raise(data):
    assert validate_gossip(TOPIC, data) is False
    assert validate_gossip(wire.EVIDENCE_TOPIC, data) is False


@settings(max_examples=300, deadline=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(BATCH) - 1), st.integers(1, 255), st.integers(0, 8))
def test_mutated_batches_rejected(at, xor, cut):
    mutated = BATCH[:at] + bytes([BATCH[at] ^ xor]) + BATCH[at + 1 : len(BATCH) - cut]
    assert validate_gossip(TOPIC, mutated) is False


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.binary(max_size=64)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, deadline=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_values, max_size=4))
def test_structured_garbage_rejected(tail):
    for head in ([wire.MAGIC_BATCH, 1], [wire.MAGIC_BATCH, 1, RUN], [wire.MAGIC_EVIDENCE, 1, "dispute"]):
        data = msgpack.packb(head + tail, use_bin_type=True)
        assert validate_gossip(TOPIC, data) is False
        assert validate_gossip(wire.EVIDENCE_TOPIC, data) is False
