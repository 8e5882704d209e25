"""Containment (issue 12): raw hostile bytes and foreign keys against a node of the adapter, in one process.

Each test names the input that stopped a node before containment, sends it as a stranger would (a
plain py-libp2p host with Noise and yamux, writing raw bytes on a raw stream), and then checks that the
node still serves an honest peer: gossip delivered by count, a request answered.
"""

from __future__ import annotations

import weakref
from contextlib import AsyncExitStack

import multiaddr
import pytest
import trio
from libp2p import new_host
from libp2p.crypto import rsa, secp256k1
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.identity_utils import create_identity_from_seed
from libp2p.peer.peerinfo import info_from_p2p_addr
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from libp2p.utils.varint import read_varint_prefixed_bytes
from test_libp2p_adapter import config, grafted, ident, run, wait_until

from p2paudit.node.net import open_node
from p2paudit.node.net._containment import CONTAINED, MALFORMED, classify
from p2paudit.node.net._pubsub import GuardedPubsub

TOPIC = "p2paudit/test/containment"
# varint 6, then field 1 (subscriptions) with a length varint cut short: the RPC does not decode.
KILLER_RPC = bytes.fromhex("06") + bytes.fromhex("0affffffff0f")


def stranger(key_pair):
    """A stock py-libp2p host speaking Noise and yamux: what a stranger on the internet runs."""
    return new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)},
        muxer_opt={YAMUX_PROTOCOL_ID: Yamux},
        listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")],
    )


async def honest_round(target, honest, got: list[bytes], label: bytes) -> None:
    """`honest` publishes one message; `target` must deliver it (the node still gossips)."""
    before = len(got)
    await honest.publish(TOPIC, label)
    await wait_until(lambda: len(got) == before + 1, f"{label!r} delivered", timeout=20)
    assert got[-1] == label


@pytest.mark.timeout(120)
def test_undecodable_gossipsub_rpc_is_contained_and_its_sender_reported():
    async def body():
        events = []
        got: list[bytes] = []
        async with AsyncExitStack() as stack:
            node = await stack.enter_async_context(open_node(ident(1), config(), events.append))
            honest = await stack.enter_async_context(open_node(ident(2), config(bootstrap=(node.listen_addrs()[0],))))
            await node.subscribe(TOPIC, lambda origin, data: got.append(data))
            await honest.subscribe(TOPIC, lambda origin, data: None)
            await wait_until(lambda: honest.gossip_peers(TOPIC) and node.gossip_peers(TOPIC), "subscriptions")
            await honest_round(node, honest, got, b"before")

            key_pair = create_identity_from_seed(bytes([77]) * 32)
            host = stranger(key_pair)
            async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                await host.connect(info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0])))
                for protocol in ("/meshsub/1.1.0", "/meshsub/1.2.0", "/meshsub/1.0.0"):
                    stream = await host.new_stream(node.host.get_id(), [TProtocol(protocol)])
                    await stream.write(KILLER_RPC)
                    await trio.sleep(0.3)
                await wait_until(lambda: sum(e.kind == MALFORMED for e in events) >= 1, "the malformed report")
            sender = str(host.get_id())
            assert {e.peer for e in events if e.kind == MALFORMED} == {sender}
            assert all("DecodeError" in e.detail for e in events if e.kind == MALFORMED)
            await honest_round(node, honest, got, b"after")
            assert got == [b"before", b"after"]

    run(body, 40, mock_clock=True)


@pytest.mark.slow  # 4 s for its 2 cases (fast tier: pytest -m 'not slow')
@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["secp256k1", "rsa"])
def test_peer_whose_key_is_not_ed25519_is_refused_at_the_handshake(kind):
    async def body():
        key_pair = secp256k1.create_new_key_pair(bytes([5]) * 32) if kind == "secp256k1" else rsa.create_new_key_pair()
        async with open_node(ident(3), config()) as node:
            host = stranger(key_pair)
            async with host.run(listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
                with pytest.raises(Exception) as caught:  # noqa: B017 - the library's error type varies by stage
                    with trio.fail_after(10):
                        await host.connect(info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0])))
                assert not isinstance(caught.value, trio.TooSlowError)
                await trio.sleep(0.3)
                assert node.connected_peers() == []
                # ... and we never dial one either.
                host_addr = f"{host.get_addrs()[0]}"
                with pytest.raises(Exception):  # noqa: B017 - RequestFailed (ours) after the handshake refusal
                    await node.connect(host_addr)
                assert node.connected_peers() == []

    run(body, 30, mock_clock=True)


async def _two_writers(pubsub_cls) -> list[bytes]:
    """Two concurrent write_msg calls of RPCs larger than a yamux frame on one stream; what the reader parsed."""
    received: list[bytes] = []
    done = trio.Event()

    async def reader(stream) -> None:
        for _ in range(2):
            received.append(await read_varint_prefixed_bytes(stream))
        done.set()

    pairs = [create_identity_from_seed(bytes([60 + i]) * 32) for i in range(2)]
    a, b = (stranger(kp) for kp in pairs)
    b.set_stream_handler(TProtocol("/test/rpc/1"), reader)
    any_addr = [multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]
    async with a.run(listen_addrs=any_addr), b.run(listen_addrs=any_addr):
        await a.connect(info_from_p2p_addr(multiaddr.Multiaddr(f"{b.get_addrs()[0]}")))
        stream = await a.new_stream(b.get_id(), [TProtocol("/test/rpc/1")])
        writer = pubsub_cls.__new__(pubsub_cls)  # only write_msg is used: no service started
        writer._write_locks = weakref.WeakKeyDictionary()  # what GuardedPubsub.__init__ adds
        rpcs = [rpc_pb2.RPC(publish=[rpc_pb2.Message(data=bytes([i]) * 300_000, topicIDs=[TOPIC])]) for i in (1, 2)]
        async with trio.open_nursery() as nursery:
            for rpc in rpcs:
                nursery.start_soon(writer.write_msg, stream, rpc)
        with trio.move_on_after(10):
            await done.wait()
    return received


@pytest.mark.timeout(120)
def test_concurrent_rpc_writes_on_one_stream_arrive_whole():
    """py-libp2p's own write_msg splices two large RPCs (yamux locks per frame); GuardedPubsub does not."""

    def decodes(frames: list[bytes]) -> bool:
        try:
            return len(frames) == 2 and all(rpc_pb2.RPC.FromString(f).publish for f in frames)
        except Exception:  # noqa: BLE001 - a spliced frame may fail to parse in many ways
            return False

    stock: list[bytes] = []
    ours: list[bytes] = []

    async def body():
        stock.extend(await _two_writers(Pubsub))
        ours.extend(await _two_writers(GuardedPubsub))

    run(body, 40, mock_clock=True)
    assert not decodes(stock), "baseline: py-libp2p's write_msg did not interleave this time"
    assert decodes(ours)
    assert sorted(rpc_pb2.RPC.FromString(f).publish[0].data[0] for f in ours) == [1, 2]


def test_classify_blames_the_peer_only_for_bytes_that_do_not_decode():
    from google.protobuf.message import DecodeError

    from p2paudit.node.wire import WireError

    assert classify(DecodeError("truncated")) == MALFORMED
    assert classify(WireError("not canonical")) == MALFORMED
    assert classify(ExceptionGroup("g", [DecodeError("x"), WireError("y")])) == MALFORMED
    assert classify(KeyError("our bug")) == CONTAINED
    assert classify(ExceptionGroup("g", [DecodeError("x"), KeyError("bug")])) == CONTAINED
    assert classify(trio.BrokenResourceError()) == CONTAINED


@pytest.mark.timeout(120)  # 11 s on the real clock; 1-2 s on MockClock (the validators' 0.6 s waited out at once)
def test_a_burst_slower_to_validate_than_5_s_is_held_back_not_dropped():
    """150 messages whose validation takes 0.6 s each (10 at a time): py-libp2p's own 5 s validation time-out
    dropped everything past about the 80th, silently. Here the sender is held back (its stream is not read
    while 32 of its messages are in flight) and every message is delivered."""
    count, delay = 150, 0.6

    async def body():
        got: list[bytes] = []
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(open_node(ident(11), config(origin_rate=None)))
            b = await stack.enter_async_context(
                open_node(ident(12), config(bootstrap=(a.listen_addrs()[0],), origin_rate=None))
            )

            async def slow_check(origin: str, data: bytes) -> bool:
                await trio.sleep(delay)
                return True

            b.set_validator(TOPIC, slow_check)
            await b.subscribe(TOPIC, lambda origin, data: got.append(data))
            await a.subscribe(TOPIC, lambda origin, data: None)
            await wait_until(lambda: a.gossip_peers(TOPIC) and b.gossip_peers(TOPIC), "subscriptions")
            await wait_until(lambda: grafted((a, b), TOPIC), "the mesh grafted")
            for i in range(count):
                await a.publish(TOPIC, b"burst %d " % i + bytes(2000))
            await wait_until(lambda: len(got) == count, f"{count} delivered", timeout=60)
            assert b.gossip.pubsub.gated_reads > 0  # the sender was held back, not dropped
            assert sorted(got) == sorted(b"burst %d " % i + bytes(2000) for i in range(count))

    run(body, 40, mock_clock=True)


@pytest.mark.slow  # 8 s (fast tier: pytest -m 'not slow')
@pytest.mark.timeout(120)
def test_inbound_slots_come_back_when_connections_close():
    """py-libp2p 0.8.1 kept each inbound connection's slot until the node stopped: after max_connections -
    min_connections inbound connections in a node's lifetime nobody new could connect. 16 connect-and-leave
    cycles against a node with 10 inbound slots."""

    async def body():
        async with open_node(ident(21), config(max_connections=10)) as node:
            target = info_from_p2p_addr(multiaddr.Multiaddr(node.listen_addrs()[0]))
            any_addr = [multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]
            for i in range(16):
                host = stranger(create_identity_from_seed(bytes([100 + i]) * 32))
                peer = str(host.get_id())
                async with host.run(listen_addrs=any_addr):
                    with trio.fail_after(10):
                        await host.connect(target)
                    await wait_until(lambda p=peer: p in node.connected_peers(), f"connection {i}", 10)
                    await host.get_network().close()  # a stock host leaves its sockets open when run() ends
                await wait_until(lambda p=peer: p not in node.connected_peers(), f"close {i}", 10)

    run(body, 60, mock_clock=True)
