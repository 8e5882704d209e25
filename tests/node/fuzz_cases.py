"""The inputs of each protocol, a pure function of (seed, protocol, count).

Part of the fuzzing harness of fuzz_peer.py. Framing, oversize, structured and mutated.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterable

import msgpack
import multiaddr
from fuzz_corpus import (
    Corpus,
    identify_seeds,
)
from fuzz_inputs import (
    FRAME_LIMITS,
    IDENTIFY,
    IDENTIFY_PUSH,
    KAD,
    KILLER_RPC,
    MESHSUB,
    MS_HEADER,
    NOISE_MSG1,
    NOISE_MSG3,
    NOISE_PAYLOAD,
    PEERS,
    SYNC,
    TCP,
    WITNESS,
    YAMUX,
    YAMUX_HEADER,
    Case,
    frame,
    frame_attack,
    insert_bytes,
    ms_line,
    mutate_bytes,
    mutate_msgpack,
    uvarint,
)
from libp2p.identity.identify.pb.identify_pb2 import Identify
from libp2p.kad_dht.pb.kademlia_pb2 import Message as KadMessage
from libp2p.kad_dht.pb.kademlia_pb2 import Record as KadRecord
from libp2p.peer.id import ID
from libp2p.pubsub.pb import rpc_pb2
from libp2p.security.noise.messages import NoiseHandshakePayload

from p2paudit.node import wire

# -- generators ----------------------------------------------------------------------------------------------


def make_cases(protocol: str, corpus: Corpus, seed: int, n: int) -> list[Case]:
    """n inputs for `protocol`, a pure function of (seed, protocol, n, corpus)."""
    rng = random.Random(f"p2paudit fuzz {seed} {protocol}")
    seeds = corpus.seeds[protocol]
    out: list[tuple[str, bytes]] = list(_specials(protocol, seeds))
    while len(out) < n:
        out.append(_one_case(protocol, corpus, rng, seeds))
    return [Case(protocol, kind, i, data) for i, (kind, data) in enumerate(out[:n])]


def _specials(protocol: str, seeds: list[bytes]) -> Iterable[tuple[str, bytes]]:
    if protocol in MESHSUB:
        yield "killer", KILLER_RPC
    if protocol in FRAME_LIMITS:
        yield "valid", frame(seeds[0])
        yield "empty-frame", b"\x00"
    else:
        yield "valid", seeds[0]
    yield "nothing", b""


def _one_case(protocol: str, corpus: Corpus, rng: random.Random, seeds: list[bytes]) -> tuple[str, bytes]:
    framed = protocol in FRAME_LIMITS
    wrap = frame if framed else (lambda body: body)
    seed = rng.choice(seeds)
    r = rng.random()
    if r < 0.05:
        return "valid", wrap(seed)
    if r < 0.40:
        ops, body = mutate_bytes(rng, seed, seeds)
        return f"mutate:{ops}", wrap(body)
    if r < 0.55:
        return _structured(protocol, corpus, rng, seed)
    if r < 0.68:
        ops, data = mutate_bytes(rng, wrap(seed), [wrap(s) for s in seeds])
        return f"mutate-whole:{ops}", data
    if r < 0.82:
        return _framing(protocol, rng, seed, seeds)
    if r < 0.97:
        size = rng.choice((rng.randint(0, 16), rng.randint(0, 256), rng.randint(0, 4096)))
        body = rng.randbytes(size)
        return ("random-framed", frame(body)) if framed and rng.random() < 0.5 else ("random", body)
    return _oversize(protocol, rng, seed)


def _framing(protocol: str, rng: random.Random, seed: bytes, seeds: list[bytes]) -> tuple[str, bytes]:
    if protocol in FRAME_LIMITS:
        name, data = frame_attack(rng, seed, FRAME_LIMITS[protocol], seeds)
        return f"frame:{name}", data
    if protocol == TCP:
        name = rng.choice(("garbage-before", "garbage-within", "long-name", "many-lines", "no-newline"))
        data = {
            "garbage-before": lambda: rng.randbytes(rng.randint(1, 64)) + seed,
            "garbage-within": lambda: insert_bytes(rng, seed, []),
            "long-name": lambda: MS_HEADER + ms_line(b"/" + b"a" * rng.choice((100, 1000, 65535))),
            "many-lines": lambda: MS_HEADER + ms_line(b"/x") * rng.randint(10, 2000),
            "no-newline": lambda: MS_HEADER + frame(b"/noise"),
        }[name]()
        return f"multistream:{name}", data
    if protocol in (NOISE_MSG1, NOISE_MSG3):
        body = seed[2:]
        name = rng.choice(("len-ffff", "len-zero", "len-short", "len-long", "two-messages"))
        data = {
            "len-ffff": b"\xff\xff" + body,
            "len-zero": b"\x00\x00" + body,
            "len-short": max(0, len(body) - rng.randint(1, 16)).to_bytes(2, "big") + body,
            "len-long": min(65535, len(body) + rng.randint(1, 100)).to_bytes(2, "big") + body,
            "two-messages": seed + seed,
        }[name]
        return f"noise-frame:{name}", data
    if protocol == YAMUX:
        frames = b"".join(_yamux_header_attack(rng) for _ in range(rng.randint(1, 4)))
        return "yamux-header", frames
    ops, data = mutate_bytes(rng, seed, seeds)
    return f"mutate:{ops}", data


def _yamux_header_attack(rng: random.Random) -> bytes:
    kind = rng.choice((0, 1, 2, 3, rng.randrange(256)))
    flags = rng.choice((0, 1, 2, 4, 8, 0xFFFF, rng.randrange(1 << 16)))
    stream = rng.choice((0, 1, 2, 3, 0x7FFFFFFF, 0xFFFFFFFF, rng.randrange(1 << 32)))
    length = rng.choice((0, 1, 32, 0x7FFFFFFF, 0xFFFFFFFF, 256 * 1024, 256 * 1024 + 1, rng.randrange(1 << 32)))
    version = 0 if rng.random() < 0.8 else rng.randrange(1, 256)
    payload = rng.randbytes(rng.choice((0, 8, 64))) if kind == 0 else b""
    return struct.pack(YAMUX_HEADER, version, kind, flags, stream, length) + payload


def _oversize(protocol: str, rng: random.Random, seed: bytes) -> tuple[str, bytes]:
    """Past the protocol's limit: a whole body up to 2 MiB; above that only the announced length (Kademlia's
    4 MiB limit would make each input 4 MiB). The padding repeats one byte, so the record compresses."""
    limit = FRAME_LIMITS.get(protocol)
    pad = rng.randbytes(1)
    if limit is not None and limit > 2 << 20:
        return "oversize-announced", uvarint(limit + rng.randint(1, 1024)) + seed + pad * 4096
    if limit is not None:
        return "oversize", frame(seed + pad * (limit + rng.randint(1, 1024) - len(seed)))
    size = {TCP: 1 << 20, NOISE_MSG1: 65535, NOISE_MSG3: 65535, NOISE_PAYLOAD: 60000, YAMUX: 300 * 1024}
    body = seed + pad * (size.get(protocol, 1 << 20) - len(seed))
    if protocol in (NOISE_MSG1, NOISE_MSG3):
        body = b"\xff\xff" + body[2:]
    return "oversize", body


def _structured(protocol: str, corpus: Corpus, rng: random.Random, seed: bytes) -> tuple[str, bytes]:
    """Mutations that know the message's structure, so the result gets past the outer parsing."""
    if protocol in (SYNC, WITNESS, PEERS):
        name, body = mutate_msgpack(rng, seed) if seed else ("msgpack-whole", msgpack.packb([rng.randrange(9)]))
        return name, frame(body)
    if protocol in MESHSUB:
        return _pubsub_structured(corpus, rng)
    if protocol == KAD:
        return "kad-generated", frame(_kad_generated(corpus, rng).SerializeToString())
    if protocol in (IDENTIFY, IDENTIFY_PUSH):
        return "identify-generated", frame(_identify_generated(corpus, rng).SerializeToString())
    if protocol == NOISE_PAYLOAD:
        message = NoiseHandshakePayload.deserialize(seed)
        key = rng.choice((rng.randbytes(rng.randint(0, 80)), message.id_pubkey.serialize()[:-1], b"\x08\x02" + seed))
        sig = rng.choice((b"", rng.randbytes(64), message.id_sig[:-1]))
        return "payload-fields", _noise_pb(key, sig, rng.randbytes(rng.randint(0, 40)) if rng.random() < 0.3 else b"")
    ops, data = mutate_bytes(rng, seed, [seed])
    return f"mutate:{ops}", data


def _noise_pb(key: bytes, sig: bytes, extensions: bytes) -> bytes:
    out = b"\x0a" + uvarint(len(key)) + key + b"\x12" + uvarint(len(sig)) + sig
    return out + (b"\x22" + uvarint(len(extensions)) + extensions if extensions else b"")


def _random_topic(corpus: Corpus, rng: random.Random) -> str:
    return rng.choice((corpus.topic, corpus.topic, wire.EVIDENCE_TOPIC, "", "/p2paudit/run/00/v1", "t" * 5000))


def _pubsub_structured(corpus: Corpus, rng: random.Random) -> tuple[str, bytes]:
    """An RPC built from parts: a message whose data is a mutated batch or evidence, validly re-signed (so it
    reaches our validator), subscriptions, control messages of every kind, a sender record."""
    rpc, parts = rpc_pb2.RPC(), []
    if rng.random() < 0.7:
        data = rng.choice(corpus.gossip_data)
        what, data = mutate_msgpack(rng, data) if rng.random() < 0.6 else mutate_bytes(rng, data, corpus.gossip_data)
        topics = [_random_topic(corpus, rng) for _ in range(rng.choice((1, 1, 2)))]
        rpc.publish.append(corpus.pubsub_message(data, topics, rng.randbytes(8)))
        parts.append(f"resigned-{what}")
    if rng.random() < 0.3:
        rpc.subscriptions.extend(
            rpc_pb2.RPC.SubOpts(subscribe=rng.random() < 0.5, topicid=_random_topic(corpus, rng))
            for _ in range(rng.choice((1, 3, 200)))
        )
        parts.append("subscriptions")
    if rng.random() < 0.4:
        rpc.control.CopyFrom(_control_generated(corpus, rng))
        parts.append("control")
    if rng.random() < 0.1:
        rpc.senderRecord = rng.choice(
            (rng.randbytes(rng.randint(0, 200)), corpus.sealed_record(["/ip4/1.2.3.4/tcp/1"]))
        )
        parts.append("sender-record")
    return "rpc:" + "+".join(parts or ["empty"]), frame(rpc.SerializeToString())


def _ids(rng: random.Random) -> list[bytes]:
    return [rng.randbytes(rng.choice((0, 32, 33, 1000))) for _ in range(rng.choice((0, 1, 5, 500)))]


def _control_generated(corpus: Corpus, rng: random.Random) -> rpc_pb2.ControlMessage:
    control = rpc_pb2.ControlMessage()
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(("ihave", "iwant", "graft", "prune", "idontwant"))
        topic = _random_topic(corpus, rng)
        if kind == "ihave":
            control.ihave.append(rpc_pb2.ControlIHave(topicID=topic, messageIDs=_ids(rng)))
        elif kind == "iwant":
            control.iwant.append(rpc_pb2.ControlIWant(messageIDs=_ids(rng)))
        elif kind == "graft":
            control.graft.append(rpc_pb2.ControlGraft(topicID=topic))
        elif kind == "prune":
            record = rng.choice((b"", rng.randbytes(100), corpus.sealed_record(["/ip4/127.0.0.1/tcp/1"])))
            peers = [rpc_pb2.PeerInfo(peerID=rng.randbytes(rng.choice((0, 38))), signedPeerRecord=record)]
            control.prune.append(
                rpc_pb2.ControlPrune(topicID=topic, peers=peers, backoff=rng.choice((0, 1, 2**64 - 1)))
            )
        else:
            control.idontwant.append(rpc_pb2.ControlIDontWant(messageIDs=_ids(rng)))
    return control


def _random_addr(rng: random.Random) -> bytes:
    good = multiaddr.Multiaddr(f"/ip4/127.0.0.{rng.randrange(256)}/tcp/{rng.randrange(65536)}").to_bytes()
    return rng.choice((good, rng.randbytes(rng.randint(0, 40)), good[:-1], b"\x04" + good))


def _kad_generated(corpus: Corpus, rng: random.Random) -> KadMessage:
    me = ID.from_pubkey(corpus.author.public_key).to_bytes()
    key = rng.choice((me, rng.randbytes(rng.choice((0, 1, 34, 100, 5000))), b"/pk/" + me, b"\x12\x20" + me))
    message = KadMessage(type=rng.choice((0, 1, 2, 3, 4, 5)), key=key, clusterLevelRaw=rng.choice((0, -1, 2**31 - 1)))
    for group in (message.closerPeers, message.providerPeers):
        for _ in range(rng.choice((0, 0, 1, 3, 100))):
            group.append(
                KadMessage.Peer(
                    id=rng.choice((me, rng.randbytes(rng.choice((0, 38))))),
                    addrs=[_random_addr(rng) for _ in range(rng.choice((0, 1, 3, 50)))],
                    connection=rng.choice((0, 1, 2, 3)),
                )
            )
    if rng.random() < 0.3:
        message.record.CopyFrom(KadRecord(key=key, value=rng.randbytes(rng.randint(0, 300)), timeReceived="x"))
    if rng.random() < 0.2:
        message.senderRecord = rng.choice((rng.randbytes(80), corpus.sealed_record(["/ip4/127.0.0.1/tcp/1"])))
    return message


def _identify_generated(corpus: Corpus, rng: random.Random) -> Identify:
    message = Identify()
    message.ParseFromString(corpus.seeds[IDENTIFY][0] if IDENTIFY in corpus.seeds else identify_seeds(corpus)[0])
    pick = rng.choice(("listen_addrs", "public_key", "protocols", "signedPeerRecord", "observed_addr", "all"))
    if pick in ("listen_addrs", "all"):
        del message.listen_addrs[:]
        message.listen_addrs.extend(_random_addr(rng) for _ in range(rng.choice((0, 1, 5, 1000))))
    if pick in ("public_key", "all"):
        message.public_key = rng.choice((b"", rng.randbytes(36), b"\x08\x01\x12\x20" + rng.randbytes(32)))
    if pick in ("protocols", "all"):
        del message.protocols[:]
        message.protocols.extend("/" + "p" * rng.choice((1, 100, 10000)) for _ in range(rng.choice((0, 3, 500))))
    if pick in ("signedPeerRecord", "all"):
        message.signedPeerRecord = rng.choice(
            (b"", rng.randbytes(150), corpus.sealed_record(["/ip4/9.9.9.9/tcp/9"], 0))
        )
    if pick in ("observed_addr", "all"):
        message.observed_addr = _random_addr(rng)
    return message
