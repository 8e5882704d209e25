"""Wire formats: round trips, and every kind of non-canonical or out-of-limit message refused."""

import hashlib

import msgpack
import pytest
from node_helpers import RUN, key, signed

from p2paudit.attest.store import origin_for
from p2paudit.node import wire
from p2paudit.node.wire import (
    Evidence,
    GossipBatch,
    Page,
    RangeProof,
    RangeRequest,
    StatusRequest,
    StatusResponse,
    SyncRefusal,
    WireError,
    WitnessRequest,
    WitnessResponse,
)

H = bytes(range(32))
ENVELOPES = tuple(signed(key(1), step).encoded for step in range(3))


def _messages():
    """(encoded, decoder, value) for one example of every message."""
    return [
        (wire.encode_batch(GossipBatch(RUN, ENVELOPES)), wire.decode_batch, GossipBatch(RUN, ENVELOPES)),
        (
            wire.encode_evidence(Evidence("dispute", ENVELOPES[0], ENVELOPES[1])),
            wire.decode_evidence,
            Evidence("dispute", ENVELOPES[0], ENVELOPES[1]),
        ),
        (
            wire.encode_evidence(Evidence("split_view", "a\n1\n\n", "b\n")),
            wire.decode_evidence,
            Evidence("split_view", "a\n1\n\n", "b\n"),
        ),
        (wire.encode_sync_request(StatusRequest()), wire.decode_sync_request, StatusRequest()),
        (wire.encode_sync_request(RangeRequest(300, 256, 44)), wire.decode_sync_request, RangeRequest(300, 256, 44)),
        (
            wire.encode_sync_response(StatusResponse("note\n", ((RUN, 7),))),
            wire.decode_sync_response,
            StatusResponse("note\n", ((RUN, 7),)),
        ),
        (
            wire.encode_sync_response(Page(5, ENVELOPES, RangeProof((H,), (H, H)))),
            wire.decode_sync_response,
            Page(5, ENVELOPES, RangeProof((H,), (H, H))),
        ),
        (wire.encode_sync_response(SyncRefusal("no")), wire.decode_sync_response, SyncRefusal("no")),
        (
            wire.encode_witness_request(WitnessRequest(3, (H, H), "n\n")),
            wire.decode_witness_request,
            WitnessRequest(3, (H, H), "n\n"),
        ),
        (
            wire.encode_witness_response(WitnessResponse(wire.WITNESS_OLD_SIZE_MISMATCH, 9, "x")),
            wire.decode_witness_response,
            WitnessResponse(5, 9, "x"),
        ),
    ]


@pytest.mark.parametrize("index", range(10))
def test_round_trip(index):
    data, decode, value = _messages()[index]
    assert decode(data) == value
    assert decode(bytearray(data)) == value
    assert decode(memoryview(data)) == value


@pytest.mark.parametrize("index", range(10))
def test_trailing_bytes_truncation_and_wrong_header_refused(index):
    data, decode, _ = _messages()[index]
    with pytest.raises(WireError, match="trailing"):
        decode(data + b"\x00")
    with pytest.raises(WireError):
        decode(data[:-1])
    fields = msgpack.unpackb(data, raw=False)
    with pytest.raises(WireError, match="version is 2"):
        decode(msgpack.packb([fields[0], 2, *fields[2:]], use_bin_type=True))
    with pytest.raises(WireError, match="magic"):
        decode(msgpack.packb(["p2paudit/other", *fields[1:]], use_bin_type=True))
    with pytest.raises(WireError, match="max_map_len"):
        decode(msgpack.packb({"a": 1}))
    with pytest.raises(WireError, match="magic and a version"):
        decode(msgpack.packb(7))
    with pytest.raises(WireError):
        decode(msgpack.packb(fields[:-1], use_bin_type=True))


def test_non_minimal_int_refused():
    # 0x93 array(3) + "p2paudit/sync" + version 1 as uint8 (0xcc 0x01) instead of fixint.
    good = wire.encode_sync_request(StatusRequest())
    bad = good.replace(b"\x01\xae", b"\xcc\x01\xae", 1)
    assert bad != good
    with pytest.raises(WireError, match="canonical"):
        wire.decode_sync_request(bad)
    # A range count as uint16 instead of fixint.
    good = wire.encode_sync_request(RangeRequest(300, 256, 44))
    assert good.endswith(b"\x2c")
    with pytest.raises(WireError, match="canonical"):
        wire.decode_sync_request(good[:-1] + b"\xcd\x00\x2c")


def test_bytes_as_str_bool_and_float_refused():
    with pytest.raises(WireError, match="want bytes"):
        wire.decode_batch(msgpack.packb([wire.MAGIC_BATCH, 1, "x" * 32, [ENVELOPES[0]]], use_bin_type=True))
    with pytest.raises(WireError, match="want an integer"):
        wire.decode_sync_request(msgpack.packb([wire.MAGIC_SYNC, 1, "range", True, 0, 1]))
    with pytest.raises(WireError, match="want an integer"):
        wire.decode_sync_request(msgpack.packb([wire.MAGIC_SYNC, 1, "range", 10.0, 0, 1]))
    with pytest.raises(WireError, match="version"):
        wire.decode_batch(msgpack.packb([wire.MAGIC_BATCH, True, RUN, [ENVELOPES[0]]], use_bin_type=True))


def test_limits():
    with pytest.raises(WireError, match="want 1..256"):
        wire.encode_batch(GossipBatch(RUN, ENVELOPES[:1] * 257))
    with pytest.raises(WireError, match="want 1..256"):
        wire.encode_batch(GossipBatch(RUN, ()))
    with pytest.raises(WireError, match="more than the limit"):
        wire.decode_batch(b"\x00" * (wire.MAX_BATCH_BYTES + 1))
    with pytest.raises(WireError, match="more than the limit 262144"):
        wire.encode_batch(GossipBatch(RUN, (b"\x01" * 4096,) * 70))
    with pytest.raises(WireError, match="want 1..4096"):
        wire.encode_batch(GossipBatch(RUN, (b"\x01" * 4097,)))
    with pytest.raises(WireError, match="range count is 257"):
        wire.encode_sync_request(RangeRequest(1000, 0, 257))
    with pytest.raises(WireError, match=r"range \[8, 12\) is not within a tree of size 10"):
        wire.decode_sync_request(msgpack.packb([wire.MAGIC_SYNC, 1, "range", 10, 8, 4]))
    with pytest.raises(WireError, match="65 items"):
        wire.encode_witness_request(WitnessRequest(1, (H,) * 65, "n\n"))
    with pytest.raises(WireError, match="has 31 bytes"):
        wire.encode_witness_request(WitnessRequest(1, (H[:31],), "n\n"))
    with pytest.raises(WireError, match="kind 'tampered'"):
        wire.encode_evidence(Evidence("tampered", b"a", b"b"))


def test_batches_split_by_count_and_bytes():
    items = [signed(key(2), step).encoded for step in range(600)]
    encoded = wire.batches(RUN, items)
    decoded = [wire.decode_batch(data) for data in encoded]
    assert [len(b.envelopes) for b in decoded] == [256, 256, 88]
    assert [e for b in decoded for e in b.envelopes] == items
    big = [b"\x01" * 4000] * 130
    assert all(len(data) <= wire.MAX_BATCH_BYTES for data in wire.batches(RUN, big))
    assert sum(len(wire.decode_batch(d).envelopes) for d in wire.batches(RUN, big)) == 130


def test_topics_and_message_ids():
    topic = wire.run_topic(RUN)
    assert topic == f"/p2paudit/run/{RUN.hex()}/v1"
    assert wire.topic_run_id(topic) == RUN
    for bad in (topic.upper(), topic + "x", "/p2paudit/run//v1", wire.EVIDENCE_TOPIC, None):
        with pytest.raises(WireError):
            wire.topic_run_id(bad)
    assert wire.message_id(b"abc") == hashlib.sha256(b"p2paudit/message-id/v1\x00abc").digest()
    assert wire.message_id(b"abc") != wire.message_id(b"abd")


def test_origin_names_its_key():
    identity = key(3)
    origin = origin_for(identity.public_key)
    assert wire.origin_public_key(origin) == identity.public_key
    for bad in (
        "example.com/log",
        origin + "1",
        origin[:-1],
        origin.replace("ledger", "ledgers"),
        "p2paudit.dev/ledger/0OIl",
    ):
        with pytest.raises(WireError):
            wire.origin_public_key(bad)
