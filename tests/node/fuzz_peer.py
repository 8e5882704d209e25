"""A fuzzing harness against a `p2paudit daemon` running as a real process (test_fuzz.py, benchmarks/fuzz_bench.py).

Every protocol the daemon offers gets random, truncated, oversized and mutated inputs from fresh Ed25519
identities: libp2p streams (gossipsub RPCs on /meshsub/1.0.0, 1.1.0 and 1.2.0, sync, witness, peer exchange,
settled, Kademlia, identify and identify push, ping) and raw TCP below them (the multistream-select header,
the Noise XX handshake's first and third messages and its signed payload, yamux frames inside a finished
Noise session). Valid messages come first (wire encoders, real attestations of the run signed by a fuzz
key, a real witness request, signed pubsub messages, Kademlia and identify protobufs) and are then mutated;
random bytes are mixed in. The inputs of a protocol are a pure function of (seed, protocol, count), and each
one is recorded (protocol, kind, bytes) so that a failing one can be replayed (`fuzz_daemon(cases=...)`).

After every input a ping (on the fuzz connection, else on a fresh identity's) shows the daemon still
serves, and every 25 inputs a fresh identity must be admitted too (a daemon that serves the peers it has
but admits no new one is wedged for the network). A daemon that exits, cannot be reached, or stops
writing its status file is a `Finding` whose suspects are the last inputs sent; the daemon is restarted on
its port and fuzzing goes on, and at the end the first finding of each cause is replayed input by input on
a fresh daemon to name the culprit. An honest node (the adapter's open_node) asks for the sync status and
publishes a fresh attestation every few seconds, and checks it is stored (found in a sync page proved
under the daemon's signed checkpoint).
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import socket
import struct
import time
import zlib
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgpack
import multiaddr
import trio
from libp2p import new_host
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import X25519PrivateKey
from libp2p.custom_types import TProtocol
from libp2p.identity.identify.pb.identify_pb2 import Identify
from libp2p.identity_utils import create_identity_from_seed
from libp2p.kad_dht.pb.kademlia_pb2 import Message as KadMessage
from libp2p.kad_dht.pb.kademlia_pb2 import Record as KadRecord
from libp2p.network.config import ConnectionConfig
from libp2p.peer.envelope import seal_record
from libp2p.peer.id import ID
from libp2p.peer.peer_record import PeerRecord
from libp2p.peer.peerinfo import PeerInfo
from libp2p.pubsub.pb import rpc_pb2
from libp2p.security.noise.messages import NoiseHandshakePayload, make_handshake_payload_sig
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from noise.connection import Keypair as NoiseKeypair
from noise.connection import NoiseConnection

from p2paudit.attest.audits import attestation_from_audit
from p2paudit.attest.record import sign_attestation
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.audit.replay import open_run
from p2paudit.identity import Identity, identity_from_seed
from p2paudit.node import sync, wire, witness
from p2paudit.node.auditor import AuditPolicy, replay_step
from p2paudit.node.localnet import LocalNet, NodeSpec, start_node, stop, wait_listening
from p2paudit.node.status import read_status

# -- protocols and limits ------------------------------------------------------------------------------------

MESHSUB = ("/meshsub/1.0.0", "/meshsub/1.1.0", "/meshsub/1.2.0")
SYNC, WITNESS = wire.SYNC_PROTOCOL, wire.WITNESS_PROTOCOL
PEERS = "/p2paudit/peers/1.0.0"
SETTLED = "/p2paudit/settled/1.0.0"
KAD = "/ipfs/kad/1.0.0"
IDENTIFY, IDENTIFY_PUSH, PING = "/ipfs/id/1.0.0", "/ipfs/id/push/1.0.0", "/ipfs/ping/1.0.0"
STREAM_PROTOCOLS = (*MESHSUB, SYNC, WITNESS, PEERS, SETTLED, KAD, IDENTIFY, IDENTIFY_PUSH, PING)
# Raw TCP, below libp2p: bytes from the first byte of a connection; the Noise handshake's first message (after
# /noise is negotiated); its third message; the signed payload inside a real third message; yamux frames
# inside a finished Noise session (after /yamux/1.0.0 is negotiated).
TCP, NOISE_MSG1, NOISE_MSG3, NOISE_PAYLOAD, YAMUX = "tcp", "noise/msg1", "noise/msg3", "noise/payload", "yamux"
RAW_PROTOCOLS = (TCP, NOISE_MSG1, NOISE_MSG3, NOISE_PAYLOAD, YAMUX)
ALL_PROTOCOLS = STREAM_PROTOCOLS + RAW_PROTOCOLS

# What the daemon accepts in one frame (a varint length, then the body), per protocol. Ping is not framed.
FRAME_LIMITS = {
    **dict.fromkeys(MESHSUB, (1 << 20) + 64 * 1024),  # NodeConfig.max_gossip_message + 64 KiB
    SYNC: wire.MAX_SYNC_REQUEST_BYTES,
    WITNESS: wire.MAX_WITNESS_REQUEST_BYTES,
    PEERS: 0,
    SETTLED: 0,
    KAD: 4 << 20,
    IDENTIFY: 1 << 20,
    IDENTIFY_PUSH: 1 << 20,
}
# A 6-byte RPC frame whose protobuf does not decode: it ended the whole node in py-libp2p 0.8.1
# (Pubsub.continuously_read_stream does not catch DecodeError; ../shared/notes/py-libp2p-0.8.1.md).
KILLER_RPC = bytes.fromhex("060affffffff0f")

NOISE_NAME = b"Noise_XX_25519_ChaChaPoly_SHA256"
MAX_NOISE_PLAINTEXT = 65535 - 16
YAMUX_HEADER = ">BBHII"  # version, type, flags, stream id, length (or window delta, or ping value)


# -- inputs and their record ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One input: the exact bytes written after the protocol is negotiated (raw protocols: see RAW_PROTOCOLS)."""

    protocol: str
    kind: str
    index: int
    data: bytes

    def to_json(self) -> dict:
        """Hex, or above 256 bytes zlib and base64 (the big inputs are mostly padding)."""
        head = {"protocol": self.protocol, "kind": self.kind, "index": self.index, "size": len(self.data)}
        if len(self.data) <= 256:
            return {**head, "hex": self.data.hex()}
        return {**head, "zlib": base64.b64encode(zlib.compress(self.data, 9)).decode()}

    @staticmethod
    def from_json(item: dict) -> Case:
        data = bytes.fromhex(item["hex"]) if "hex" in item else zlib.decompress(base64.b64decode(item["zlib"]))
        return Case(item["protocol"], item["kind"], item["index"], data)

    def describe(self, limit: int = 200) -> str:
        text = self.data.hex()
        more = f"..(+{len(text) - limit} hex digits)" if len(text) > limit else ""
        return f"{self.protocol} #{self.index} [{self.kind}] {len(self.data)} bytes: {text[:limit]}{more}"


def load_cases(path: Path, protocols: Iterable[str] | None = None) -> list[Case]:
    """The inputs a campaign recorded (JSON lines), optionally only those of `protocols`."""
    wanted = None if protocols is None else set(protocols)
    cases = []
    for line in path.read_text().splitlines():
        item = json.loads(line)
        if "protocol" in item and (wanted is None or item["protocol"] in wanted):
            cases.append(Case.from_json(item))
    return cases


# -- bytes ---------------------------------------------------------------------------------------------------


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def frame(body: bytes) -> bytes:
    return uvarint(len(body)) + body


def ms_line(name: bytes) -> bytes:
    """One multistream-select message: varint length, the name, a newline."""
    return frame(name + b"\n")


MS_HEADER = ms_line(b"/multistream/1.0.0")


def yamux_frame(kind: int, flags: int, stream: int, length: int, payload: bytes = b"") -> bytes:
    return struct.pack(YAMUX_HEADER, 0, kind, flags, stream, length) + payload


def noise_frame(body: bytes) -> bytes:
    return len(body).to_bytes(2, "big") + body


# -- mutations -----------------------------------------------------------------------------------------------

INTERESTING_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF)
INTERESTING_INTS = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


def _span(rng: random.Random, n: int) -> tuple[int, int]:
    i = rng.randrange(n + 1)
    return i, rng.randint(i, min(n, i + rng.choice((1, 4, 16, 256))))


def _flip(rng, d, others):
    b = bytearray(d or b"\0")
    for _ in range(rng.randint(1, 8)):
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    return bytes(b)


def _set_byte(rng, d, others):
    b = bytearray(d or b"\0")
    for _ in range(rng.randint(1, 4)):
        b[rng.randrange(len(b))] = rng.choice(INTERESTING_BYTES) if rng.random() < 0.7 else rng.randrange(256)
    return bytes(b)


def _set_word(rng, d, others):
    i = rng.randrange(len(d) + 1)
    word = struct.pack(rng.choice(("<I", ">I")), rng.choice(INTERESTING_INTS))
    return d[:i] + word + d[i + 4 :]


def _truncate(rng, d, others):
    return d[: rng.randrange(len(d))] if d else d


def _delete(rng, d, others):
    i, j = _span(rng, len(d))
    return d[:i] + d[j:]


def _duplicate(rng, d, others):
    i, j = _span(rng, len(d))
    return d[:j] + d[i:j] * rng.randint(1, 4) + d[j:]


def _insert(rng, d, others):
    i = rng.randrange(len(d) + 1)
    return d[:i] + rng.randbytes(rng.randint(1, 64)) + d[i:]


def _append(rng, d, others):
    return d + rng.randbytes(rng.randint(1, 256))


def _splice(rng, d, others):
    other = rng.choice(others) if others else d
    return d[: rng.randrange(len(d) + 1)] + other[rng.randrange(len(other) + 1) :]


def _repeat(rng, d, others):
    return d * rng.randint(2, 8)


BYTE_OPS = {
    "flip": _flip,
    "byte": _set_byte,
    "word": _set_word,
    "truncate": _truncate,
    "delete": _delete,
    "duplicate": _duplicate,
    "insert": _insert,
    "append": _append,
    "splice": _splice,
    "repeat": _repeat,
}


def mutate_bytes(rng: random.Random, data: bytes, others: list[bytes]) -> tuple[str, bytes]:
    """One to three byte-level mutations stacked; returns their names and the result."""
    names = [rng.choice(list(BYTE_OPS)) for _ in range(rng.choice((1, 1, 1, 2, 3)))]
    for name in names:
        data = BYTE_OPS[name](rng, data, others)
    return "+".join(names), data


def frame_attack(rng: random.Random, body: bytes, limit: int, others: list[bytes]) -> tuple[str, bytes]:
    """A frame whose length prefix lies, overflows, is not minimal, or is followed by more than one frame."""
    n = len(body)
    attacks = {
        "short-length": lambda: uvarint(max(0, n - rng.randint(1, 8))) + body,
        "long-length": lambda: uvarint(n + rng.randint(1, 1000)) + body,
        "huge-length": lambda: uvarint(rng.choice((limit + 1, 2**31, 2**32 - 1, 2**63 - 1, 2**64 - 1))) + body[:64],
        "endless-varint": lambda: b"\xff" * rng.randint(9, 16) + body,
        "non-minimal": lambda: bytes([(n & 0x7F) | 0x80, n >> 7 | 0x80, 0x00]) + body,
        "empty-frame": lambda: b"\x00",
        "prefix-only": lambda: uvarint(n),
        "two-frames": lambda: frame(body) + frame(rng.choice(others) if others else body),
        "many-frames": lambda: frame(body) * rng.randint(2, 50),
    }
    name = rng.choice(list(attacks))
    return name, attacks[name]()


def _msgpack_replacement(rng: random.Random, old: object) -> tuple[str, object]:
    if type(old) is int:
        return "int", rng.choice((-1, 0, 1, 2**63 - 1, 2**63, 2**64 - 1, -(2**63), old + 1, old - 1, 255, 256))
    if type(old) is bytes:
        return "bin", rng.choice(
            (b"", old[:-1], old + b"\0", old * 2, rng.randbytes(32), mutate_bytes(rng, old, [])[1])
        )
    if type(old) is str:
        return "str", rng.choice(("", old[:-1], old + "x", "\x00", "\u00e9" * rng.randint(1, 300), old.upper()))
    if type(old) is list:
        copy = list(old)
        if copy and rng.random() < 0.5:
            del copy[rng.randrange(len(copy))]
        else:
            copy.append(rng.choice(copy) if copy else 0)
        return "array", copy
    return "other", rng.choice((None, True, 1.5, {}, [], "x", b"x"))


def mutate_msgpack(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Re-encode a valid msgpack message with one element changed (value, type or length): canonical bytes
    that pass the size and encoding checks and reach the checks behind them."""
    value = msgpack.unpackb(data, raw=False)
    slots: list[tuple[list, int]] = []

    def walk(node: object) -> None:
        if type(node) is list:
            for i, item in enumerate(node):
                slots.append((node, i))
                walk(item)

    walk(value)
    if not slots:
        return "msgpack-whole", msgpack.packb(rng.choice((None, [], 0, "x")), use_bin_type=True)
    container, i = rng.choice(slots)
    if rng.random() < 0.15:
        what, container[i] = "retype", rng.choice((None, True, 1.5, {}, [], "x", b"x", 7))
    else:
        what, container[i] = _msgpack_replacement(rng, container[i])
    return f"msgpack-{what}@{i}", msgpack.packb(value, use_bin_type=True)


# -- valid messages to start from ----------------------------------------------------------------------------


@dataclass
class Corpus:
    """Valid messages of every protocol, built from a real run: the seeds the mutations start from."""

    run_id: bytes
    topic: str
    author: KeyPair  # signs pubsub messages and the Noise payload of raw connections
    noise_static: bytes  # X25519 private key of raw connections (fixed: a recorded payload stays valid)
    audits: tuple
    gossip_data: list[bytes]  # pubsub message data: a real batch, real evidence
    seeds: dict[str, list[bytes]] = field(default_factory=dict)

    def pubsub_message(self, data: bytes, topics: list[str], seqno: bytes) -> rpc_pb2.Message:
        """A message signed by the author as strict signing wants (libp2p Pubsub.publish)."""
        msg = rpc_pb2.Message(
            from_id=ID.from_pubkey(self.author.public_key).to_bytes(), data=data, topicIDs=topics, seqno=seqno
        )
        msg.signature = self.author.private_key.sign(b"libp2p-pubsub:" + msg.SerializeToString())
        msg.key = self.author.public_key.serialize()
        return msg

    def sealed_record(self, addrs: list[str], seq: int = 1) -> bytes:
        record = PeerRecord(ID.from_pubkey(self.author.public_key), [multiaddr.Multiaddr(a) for a in addrs], seq)
        return seal_record(record, self.author.private_key).marshal_envelope()

    def honest_envelope(self, k: int) -> bytes:
        """A true attestation of the run's step 0 by a key used for nothing else (a new entry for the ledger)."""
        key = identity_from_seed(hashlib.sha256(b"p2paudit fuzz honest %d" % k).digest())
        step = next(a for a in self.audits if a.subject == "step")
        return _signed(key, step, 1_700_000_000_000 + k)


def _signed(identity: Identity, audit, time_ms: int) -> bytes:
    return sign_attestation(identity, attestation_from_audit(audit, identity.public_key, time_ms, "fuzz")).encoded


def _key(label: str) -> bytes:
    return hashlib.sha256(b"p2paudit fuzz " + label.encode()).digest()


def build_corpus(run_dir: Path, scratch: Path) -> Corpus:
    """Replay step 0 of the run (as the daemon does), sign it with fuzz keys, and build one valid message of
    each kind from it. Deterministic: the same run gives the same corpus."""
    view = open_run(run_dir)
    run_id, steps = view.manifest.run_id, view.manifest.num_steps
    audits = replay_step(view, 0, "reference", AuditPolicy())
    author = identity_from_seed(_key("author"))
    envelopes = [_signed(author, a, 1_700_000_000_000) for a in audits]
    cheat = identity_from_seed(_key("cheat"))
    step = next(a for a in audits if a.subject == "step")
    lie = replace(step, observed_digest=hashlib.sha256(b"fuzz lie").digest(), verdict="mismatch", findings=("state",))
    evidence = wire.encode_evidence(wire.Evidence("equivocation", _signed(cheat, step, 1), _signed(cheat, lie, 2)))
    batch = wire.encode_batch(wire.GossipBatch(run_id, tuple(envelopes)))
    corpus = Corpus(
        run_id=run_id,
        topic=wire.run_topic(run_id),
        author=create_identity_from_seed(_key("author")),
        noise_static=_key("noise static"),
        audits=audits,
        gossip_data=[batch, evidence],
    )
    corpus.seeds = {
        **dict.fromkeys(MESHSUB, _pubsub_seeds(corpus)),
        SYNC: _sync_seeds(),
        WITNESS: _witness_seeds(scratch, author, run_id, steps, envelopes),
        PEERS: [b"", msgpack.packb([["12D3KooW", ["/ip4/127.0.0.1/tcp/1"]]])],
        SETTLED: [b""],
        KAD: _kad_seeds(corpus),
        IDENTIFY: _identify_seeds(corpus),
        IDENTIFY_PUSH: _identify_seeds(corpus),
        PING: [hashlib.sha256(b"ping").digest()],
        TCP: [MS_HEADER + ms_line(p) for p in (b"/noise", b"/yamux/1.0.0", b"ls", b"/tls/1.0.0")] + [MS_HEADER],
        NOISE_MSG1: [noise_frame(_key("e")), noise_frame(_key("e") + b"early data")],
        NOISE_MSG3: [
            noise_frame(
                _key("s") + _key("s")[:16] + _noise_payload(corpus.author, corpus.noise_static) + _key("t")[:16]
            )
        ],
        NOISE_PAYLOAD: [_noise_payload(corpus.author, corpus.noise_static)],
        YAMUX: _yamux_seeds(),
    }
    return corpus


def _sync_seeds() -> list[bytes]:
    requests = [wire.StatusRequest(), wire.RangeRequest(1, 0, 1), wire.RangeRequest(10, 3, 4)]
    requests.append(wire.RangeRequest(2**62, 2**62 - 256, 256))
    return [wire.encode_sync_request(r) for r in requests]


def _witness_seeds(scratch: Path, author: Identity, run_id: bytes, steps: int, envelopes: list[bytes]) -> list[bytes]:
    path = scratch / "fuzz-witness.db"
    path.unlink(missing_ok=True)
    store = AttestationStore.open(path, origin_for(author.public_key))
    try:
        store.register_run(run_id, steps, "fuzz")
        store.append_many(envelopes[:1])
        small = store.checkpoint(author)
        store.append_many(envelopes[1:])
        note = store.checkpoint(author)
        out = [witness.witness_request(store.ledger, note, 0), witness.witness_request(store.ledger, note, 1)]
        return out + [witness.witness_request(store.ledger, small, 0)]
    finally:
        store.close()


def _pubsub_seeds(corpus: Corpus) -> list[bytes]:
    ids = [hashlib.sha256(d).digest() for d in corpus.gossip_data]
    control = rpc_pb2.ControlMessage(
        ihave=[rpc_pb2.ControlIHave(topicID=corpus.topic, messageIDs=ids)],
        iwant=[rpc_pb2.ControlIWant(messageIDs=ids)],
        graft=[rpc_pb2.ControlGraft(topicID=corpus.topic)],
        prune=[rpc_pb2.ControlPrune(topicID=corpus.topic, peers=[rpc_pb2.PeerInfo(peerID=ids[0])], backoff=60)],
        idontwant=[rpc_pb2.ControlIDontWant(messageIDs=ids)],
    )
    subscribe = [rpc_pb2.RPC.SubOpts(subscribe=True, topicid=t) for t in (corpus.topic, wire.EVIDENCE_TOPIC)]
    batch = corpus.pubsub_message(corpus.gossip_data[0], [corpus.topic], b"\0" * 7 + b"\1")
    evidence = corpus.pubsub_message(corpus.gossip_data[1], [wire.EVIDENCE_TOPIC], b"\0" * 7 + b"\2")
    rpcs = [
        rpc_pb2.RPC(subscriptions=subscribe),
        rpc_pb2.RPC(publish=[batch]),
        rpc_pb2.RPC(publish=[evidence]),
        rpc_pb2.RPC(control=control),
        rpc_pb2.RPC(senderRecord=corpus.sealed_record(["/ip4/127.0.0.1/tcp/4001"])),
        rpc_pb2.RPC(subscriptions=subscribe[:1], publish=[batch], control=control),
    ]
    return [r.SerializeToString() for r in rpcs]


def _kad_seeds(corpus: Corpus) -> list[bytes]:
    me = ID.from_pubkey(corpus.author.public_key).to_bytes()
    key = bytes.fromhex("1220") + hashlib.sha256(b"p2paudit/dht/" + corpus.run_id).digest()
    addr = multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/4001").to_bytes()
    peer = KadMessage.Peer(id=me, addrs=[addr], connection=1)
    messages = [
        KadMessage(type=KadMessage.FIND_NODE, key=me),
        KadMessage(type=KadMessage.GET_PROVIDERS, key=key),
        KadMessage(type=KadMessage.ADD_PROVIDER, key=key, providerPeers=[peer]),
        KadMessage(type=KadMessage.PING),
        KadMessage(type=KadMessage.GET_VALUE, key=b"/pk/" + me),
        KadMessage(type=KadMessage.PUT_VALUE, key=b"/v/x", record=KadRecord(key=b"/v/x", value=b"1")),
        KadMessage(type=KadMessage.FIND_NODE, key=me, senderRecord=corpus.sealed_record(["/ip4/127.0.0.1/tcp/4001"])),
    ]
    return [m.SerializeToString() for m in messages]


def _identify_seeds(corpus: Corpus) -> list[bytes]:
    message = Identify(
        protocol_version="ipfs/0.1.0",
        agent_version="p2paudit-fuzz",
        public_key=corpus.author.public_key.serialize(),
        listen_addrs=[multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/4001").to_bytes()],
        observed_addr=multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/4002").to_bytes(),
        protocols=[PING, IDENTIFY, *MESHSUB],
        signedPeerRecord=corpus.sealed_record(["/ip4/127.0.0.1/tcp/4001"]),
    )
    return [message.SerializeToString(), Identify(agent_version="x").SerializeToString()]


def _noise_payload(key_pair: KeyPair, static_private: bytes) -> bytes:
    """The signed handshake payload: the identity key, and its signature over the Noise static key."""
    static = X25519PrivateKey.from_bytes(static_private).get_public_key()
    signature = make_handshake_payload_sig(key_pair.private_key, static)
    return NoiseHandshakePayload(key_pair.public_key, signature).serialize()


def _yamux_seeds() -> list[bytes]:
    ping = MS_HEADER + ms_line(PING.encode())
    settled = MS_HEADER + ms_line(SETTLED.encode()) + b"\x00"
    return [
        yamux_frame(1, 1, 1, 0) + yamux_frame(0, 0, 1, len(ping), ping) + yamux_frame(0, 4, 1, 32, b"p" * 32),
        yamux_frame(0, 1, 3, len(settled), settled),
        yamux_frame(2, 1, 0, 12345),
        yamux_frame(1, 0, 0, 1 << 20),
        yamux_frame(3, 0, 0, 0),
    ]


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
            "garbage-within": lambda: _insert(rng, seed, []),
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
    message.ParseFromString(corpus.seeds[IDENTIFY][0] if IDENTIFY in corpus.seeds else _identify_seeds(corpus)[0])
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


# -- raw TCP: multistream, Noise, yamux ----------------------------------------------------------------------


class RawConn:
    """A TCP connection with exact reads (and, once Noise is done, encrypted ones)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.noise: NoiseConnection | None = None
        self.plain = bytearray()
        self.stage = "connected"

    async def _fill(self) -> None:
        chunk = await self.stream.receive_some(65536)
        if not chunk:
            raise EOFError(f"connection closed with {len(self.buf)} bytes pending")
        self.buf += chunk

    async def read_exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def read_noise_message(self) -> bytes:
        return await self.read_exactly(int.from_bytes(await self.read_exactly(2), "big"))

    async def read_plain(self, n: int) -> bytes:
        while len(self.plain) < n:
            self.plain += self.noise.decrypt(await self.read_noise_message())
        out = bytes(self.plain[:n])
        del self.plain[:n]
        return out

    async def send_plain(self, data: bytes) -> None:
        for i in range(0, max(len(data), 1), MAX_NOISE_PLAINTEXT):
            await self.stream.send_all(noise_frame(self.noise.encrypt(data[i : i + MAX_NOISE_PLAINTEXT])))

    async def drain(self, timeout: float, limit: int = 1 << 20) -> str:
        """Read until the peer closes (or `timeout`, or `limit` bytes); says which."""
        got = len(self.buf)
        with trio.move_on_after(timeout):
            while got < limit:
                chunk = await self.stream.receive_some(65536)
                if not chunk:
                    return f"closed-by-daemon after {got} bytes"
                got += len(chunk)
            return f"read-limit {got} bytes"
        return f"still-open after {got} bytes"


async def _read_ms(read_exactly: Callable) -> bytes:
    value, shift = 0, 0
    for _ in range(9):
        byte = (await read_exactly(1))[0]
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return await read_exactly(value)
    raise EOFError("multistream length longer than 9 bytes")


async def _negotiate(send: Callable, read_exactly: Callable, name: bytes) -> None:
    await send(MS_HEADER + ms_line(name))
    header, answer = await _read_ms(read_exactly), await _read_ms(read_exactly)
    if header != b"/multistream/1.0.0\n" or answer != name + b"\n":
        raise EOFError(f"multistream answered {header!r} {answer!r} to {name!r}")


def _initiator(static_private: bytes) -> NoiseConnection:
    state = NoiseConnection.from_name(NOISE_NAME)
    state.set_keypair_from_private_bytes(NoiseKeypair.STATIC, static_private)
    state.set_as_initiator()
    state.start_handshake()
    return state


async def send_raw(host: str, port: int, case: Case, corpus: Corpus, timeout: float) -> str:
    """Deliver a raw-TCP case (see RAW_PROTOCOLS); returns what the daemon did, and at which stage a
    connection that broke broke."""
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError as error:
        return f"no-connection {type(error).__name__}"
    conn = RawConn(stream)
    try:
        with trio.fail_after(10):
            if case.protocol == TCP:
                return await _send_last(conn, case.data, timeout)
            conn.stage = "multistream /noise"
            await _negotiate(stream.send_all, conn.read_exactly, NOISE_PROTOCOL_ID.encode())
            if case.protocol == NOISE_MSG1:
                return await _send_last(conn, case.data, timeout)
            return await _after_msg1(conn, case, corpus, timeout)
    except (EOFError, OSError, trio.BrokenResourceError, trio.TooSlowError) as error:
        return f"dropped {type(error).__name__} at {conn.stage}"
    finally:
        with trio.move_on_after(1):
            await stream.aclose()


async def _send_last(conn: RawConn, data: bytes, timeout: float) -> str:
    """Write the case's bytes, half-close, and wait for the daemon to close (or `timeout`)."""
    conn.stage = "sending the input"
    if conn.noise is None:
        await conn.stream.send_all(data)
    else:
        await conn.send_plain(data)
    await conn.stream.send_eof()
    conn.stage = "draining"
    return await conn.drain(timeout)


async def _after_msg1(conn: RawConn, case: Case, corpus: Corpus, timeout: float) -> str:
    # A yamux case completes the handshake as an identity of its own: two connections of one peer at once
    # are refused (one connection per peer), and sessions follow each other faster than the daemon drops one.
    key_pair, static = corpus.author, corpus.noise_static
    if case.protocol == YAMUX:
        seed = hashlib.sha256(b"p2paudit fuzz yamux %d " % case.index + case.data).digest()
        key_pair, static = create_identity_from_seed(seed), hashlib.sha256(b"noise" + seed).digest()
    state = _initiator(static)
    conn.stage = "noise msg1/msg2"
    await conn.stream.send_all(noise_frame(bytes(state.write_message(b""))))
    state.read_message(await conn.read_noise_message())
    if case.protocol == NOISE_MSG3:
        return await _send_last(conn, case.data, timeout)
    payload = case.data if case.protocol == NOISE_PAYLOAD else _noise_payload(key_pair, static)
    try:
        msg3 = bytes(state.write_message(payload))
    except Exception as error:  # the noise library refuses a payload over 65,535 bytes
        return f"unsendable {type(error).__name__}"
    conn.stage = "noise msg3"
    await conn.stream.send_all(noise_frame(msg3))
    if case.protocol == NOISE_PAYLOAD:
        return await _send_last(conn, b"", timeout)
    conn.noise = state
    conn.stage = "multistream /yamux/1.0.0"
    await _negotiate(conn.send_plain, conn.read_plain, YAMUX_PROTOCOL_ID.encode())
    return await _send_last(conn, case.data, timeout)


# -- libp2p streams from fresh identities ----------------------------------------------------------------------


def fuzz_host(seed: bytes):
    """A plain py-libp2p host (Noise, yamux) with the Ed25519 identity of `seed`; it listens nowhere."""
    key_pair = create_identity_from_seed(seed)
    noise_key = X25519PrivateKey.from_bytes(hashlib.sha256(b"noise" + seed).digest())
    return new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: NoiseTransport(key_pair, noise_privkey=noise_key)},
        muxer_opt={YAMUX_PROTOCOL_ID: Yamux},
        listen_addrs=[],
        connection_config=ConnectionConfig(max_connections_per_peer=1, dial_timeout=5.0),
    )


async def _discard(stream) -> None:
    """Our side of the daemon's own pubsub stream: read and forget, so it treats us as a gossip peer."""
    try:
        while await stream.read(65536):
            pass
    except Exception:  # the stream or connection ended: nothing to do
        pass


class Session:
    """One fresh identity connected to the target, its host running in its own task (so that a failure inside
    the library's tasks ends this session, not the campaign)."""

    def __init__(self, seed: bytes) -> None:
        self.host = fuzz_host(seed)
        self.peer_id = str(self.host.get_id())
        self._stop = trio.Event()
        self.error: BaseException | None = None

    async def _serve(self, target: PeerInfo, task_status) -> None:
        async with self.host.run(listen_addrs=[]):
            for protocol in MESHSUB:
                self.host.set_stream_handler(TProtocol(protocol), _discard)
            with trio.fail_after(10):
                await self.host.connect(target)
            task_status.started()
            await self._stop.wait()

    async def run(self, target: PeerInfo, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._serve(target, task_status)
        except Exception as error:  # the connection or the host failed: this session is over
            self.error = error

    def close(self) -> None:
        self._stop.set()


async def _reset(stream) -> None:
    with trio.move_on_after(1):
        try:
            await stream.reset()
        except Exception:  # already gone
            pass


async def send_stream(host, peer: ID, case: Case, read_timeout: float) -> str:
    """Open a stream on the case's protocol, write the bytes, half-close, read what comes back."""
    try:
        with trio.fail_after(5):
            stream = await host.new_stream(peer, [TProtocol(case.protocol)])
    except Exception as error:  # no stream: the caller probes and retries once on a fresh identity
        return f"no-stream {type(error).__name__}"
    got = 0
    try:
        with trio.fail_after(10):
            if case.data:
                await stream.write(case.data)
            await stream.close_write()
        if read_timeout <= 0:
            return "sent"
        with trio.move_on_after(read_timeout):
            while got < 1 << 20:
                chunk = await stream.read(65536)
                if not chunk:
                    return f"eof after {got} bytes"
                got += len(chunk)
        return f"still-open after {got} bytes"
    except trio.TooSlowError:
        return "write-stalled"
    except Exception as error:  # reset, closed connection: what the daemon did with the input
        name = type(error).__name__
        return f"eof after {got} bytes" if name == "StreamEOF" else f"reset after {got} bytes ({name})"
    finally:
        await _reset(stream)


async def ping(host, peer: ID, timeout: float = 3.0) -> bool:
    """One /ipfs/ping/1.0.0 round trip."""
    payload = hashlib.sha256(str(time.monotonic()).encode()).digest()
    try:
        with trio.fail_after(timeout):
            stream = await host.new_stream(peer, [TProtocol(PING)])
            try:
                await stream.write(payload)
                echo = b""
                while len(echo) < 32:
                    chunk = await stream.read(32 - len(echo))
                    if not chunk:
                        return False
                    echo += chunk
                return echo == payload
            finally:
                await _reset(stream)
    except Exception:  # any failure to round-trip is "no"
        return False


# -- the daemon under test -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_memory_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of a live process, in KiB."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


@dataclass
class Generation:
    """One daemon process: its figures and how it ended."""

    pid: int
    started: float
    baseline_rss_kib: int = 0
    peak_hwm_kib: int = 0
    last_rss_kib: int = 0
    ended: str = ""  # "" while running; else "exit <code>" / "wedged" / "stopped"
    sessions: int = 0  # libp2p connections our fuzz identities completed to it
    raw: int = 0  # raw TCP connections opened to it


class Target:
    """One `p2paudit daemon` process on 127.0.0.1 at a fixed port (restarted on the same port and home)."""

    NAME = "fuzz-target"

    def __init__(self, home: Path, run_dir: Path, seconds: float, port: int | None = None) -> None:
        self.home, self.run_dir, self.seconds = home, run_dir, seconds
        self.port = port or free_port()
        self.net = LocalNet((NodeSpec(self.NAME, home),))
        self.generations: list[Generation] = []
        self.addr = ""
        self.peer_id = ""
        self._log_offset = 0

    def start(self) -> None:
        log = self.home / "daemon.log"
        self._log_offset = log.stat().st_size if log.exists() else 0
        # --duration bounds a daemon this process could not stop (it runs in a session of its own).
        extra = ("--duration", f"{self.seconds:.0f}", "--listen", f"/ip4/127.0.0.1/tcp/{self.port}", "--quiet")
        start_node(self.net, self.net.specs[0], self.run_dir, None, "reference", 1, extra)
        self.generations.append(Generation(self.proc.pid, time.time()))
        self.addr = wait_listening(self.net, self.NAME, timeout=60)
        self.peer_id = self.addr.rsplit("/", 1)[1]

    @property
    def proc(self):
        return self.net.processes[self.NAME]

    @property
    def info(self) -> PeerInfo:
        return PeerInfo(ID.from_base58(self.peer_id), [multiaddr.Multiaddr(self.addr.split("/p2p/")[0])])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def status_age(self) -> float | None:
        """Seconds since this process last wrote its status file (None: unreadable or another process's)."""
        try:
            status = read_status(self.home / "status.json")
        except Exception:  # mid-write or missing: no answer
            return None
        return time.time() - status["written_at"] if status.get("pid") == self.proc.pid else None

    def sample_memory(self) -> None:
        found = proc_memory_kib(self.proc.pid)
        if found is not None:
            gen = self.generations[-1]
            gen.last_rss_kib, gen.peak_hwm_kib = found[0], max(gen.peak_hwm_kib, found[1])

    def set_baseline(self) -> None:
        self.sample_memory()
        self.generations[-1].baseline_rss_kib = self.generations[-1].last_rss_kib

    def log_tail(self, lines: int = 40) -> str:
        with open(self.home / "daemon.log", "rb") as f:
            f.seek(self._log_offset)
            text = f.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def end(self, how: str) -> None:
        if self.generations and not self.generations[-1].ended:
            self.sample_memory()
            self.generations[-1].ended = how
        stop(self.net)


# -- the honest peer ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HonestRound:
    at: float  # seconds since the campaign began
    phase: str  # "during" or "after"
    generation: int
    ok: bool
    detail: str
    seconds: float


class Honest:
    """An honest node (the libp2p adapter) that must be served throughout: a signed sync status, and a fresh
    attestation it publishes stored in the daemon's ledger (found in a sync page proved under its checkpoint)."""

    def __init__(self, node, target: Target, corpus: Corpus) -> None:
        self.node, self.target, self.corpus = node, target, corpus
        self.rounds: list[HonestRound] = []
        self._connected_generation = -1
        self.count = 0

    async def _connect(self) -> None:
        generation = len(self.target.generations)
        if self._connected_generation == generation and self.target.peer_id in self.node.connected_peers():
            return
        await self.node.connect(self.target.addr)
        with trio.fail_after(20):
            while self.target.peer_id not in self.node.gossip_peers(self.corpus.topic):
                await trio.sleep(0.1)
        await trio.sleep(1.5)  # a heartbeat or so: the daemon grafts us into its mesh
        self._connected_generation = generation

    async def _checkpoint(self):
        request = wire.encode_sync_request(wire.StatusRequest())
        answer = await self.node.request(self.target.peer_id, SYNC, request, max_response=wire.MAX_PAGE_BYTES)
        status = wire.decode_sync_response(answer)
        if not isinstance(status, wire.StatusResponse):
            raise AssertionError(f"status request answered with {type(status).__name__}")
        checkpoint = sync.open_peer_checkpoint(status.note)
        if checkpoint.origin != wire.ORIGIN_PREFIX + self.target.peer_id:
            raise AssertionError(f"status note of {checkpoint.origin}, want the daemon's")
        return checkpoint

    async def _entries(self, checkpoint, start: int) -> list[bytes]:
        out = []
        while start < checkpoint.size:
            count = min(wire.MAX_PAGE, checkpoint.size - start)
            request = wire.encode_sync_request(wire.RangeRequest(checkpoint.size, start, count))
            answer = await self.node.request(self.target.peer_id, SYNC, request, max_response=wire.MAX_PAGE_BYTES)
            page = wire.decode_sync_response(answer)
            if not isinstance(page, wire.Page):
                raise AssertionError(f"range request answered with {type(page).__name__}")
            out += sync.verify_page(checkpoint, page.start, page.entries, page.proof)
            start += len(page.entries)
        return out

    async def round(self, phase: str, began: float, timeout: float = 20.0) -> HonestRound:
        started = time.monotonic()
        self.count += 1
        envelope = self.corpus.honest_envelope(self.count)
        try:
            with trio.fail_after(timeout):
                await self._connect()
                before = await self._checkpoint()
                batch = wire.encode_batch(wire.GossipBatch(self.corpus.run_id, (envelope,)))
                await self.node.publish(self.corpus.topic, batch)
                scanned = before.size
                while True:
                    now = await self._checkpoint()
                    if now.size > scanned:
                        if envelope in await self._entries(now, scanned):
                            break
                        scanned = now.size
                    await trio.sleep(0.2)
            ok, detail = True, f"status ok, attestation stored at tree size <= {now.size}"
        except Exception as error:  # any failure of the honest exchange is the finding
            ok, detail = False, f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        found = HonestRound(
            started - began, phase, len(self.target.generations), ok, detail, time.monotonic() - started
        )
        self.rounds.append(found)
        return found


# -- the campaign ------------------------------------------------------------------------------------------------


@dataclass
class Finding:
    """The daemon stopped serving: "exit" (the process ended), "wedged" (alive, unreachable from a fresh
    identity), "stale" (alive, its status file not rewritten). Suspects: the last inputs sent, oldest first."""

    kind: str
    protocol: str
    suspects: list[Case]
    detail: str
    log_tail: str
    generation: int
    confirmed: Case | None = None
    confirm_detail: str = ""

    @property
    def signature(self) -> str:
        """The exception that ended the daemon and the innermost frame it names, from the log tail."""
        lines = [line.strip(" |") for line in self.log_tail.splitlines()]
        for i in range(len(lines) - 1, -1, -1):
            found = re.match(r"([\w.]+(?:Error|Exception|Exit)): ?(.*)", lines[i])
            if found and found.group(1) not in ("Error", "ExceptionGroup", "BaseExceptionGroup"):
                where = next((f for f in reversed(lines[:i]) if f.startswith("File ")), "")
                frame = re.match(r'File "(?:.*/)?([^/"]+)", line (\d+), in (\S+)', where)
                at = f" at {frame.group(1)}:{frame.group(2)} {frame.group(3)}" if frame else ""
                return f"{found.group(1)}: {found.group(2)[:100]}{at}"
        quiet = {"wedged": "alive, but admits no new connection", "stale": "alive, but its status file is stale"}
        return f"{self.kind}: {quiet.get(self.kind, 'no exception in the log tail')}"

    def describe(self) -> str:
        lines = [f"daemon {self.kind} ({self.detail}) while fuzzing {self.protocol}, daemon #{self.generation}"]
        lines.append(f"  cause: {self.signature}")
        if self.confirmed is not None:
            lines.append(f"  reproduced alone by: {self.confirmed.describe(400)}")
        elif self.confirm_detail:
            lines.append(f"  {self.confirm_detail}")
        lines.append(f"  last input sent: {self.suspects[-1].describe(400)}" if self.suspects else "  no input sent")
        tail = self.log_tail.splitlines()[-40:]
        lines.append("  daemon log tail:\n" + "\n".join("    " + line for line in tail))
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "signature": self.signature,
            "protocol": self.protocol,
            "detail": self.detail,
            "generation": self.generation,
            "confirmed": None if self.confirmed is None else self.confirmed.to_json(),
            "confirm_detail": self.confirm_detail,
            "suspects": [c.to_json() for c in self.suspects],
            "log_tail": self.log_tail,
        }


@dataclass
class ProtocolStats:
    protocol: str
    planned: int
    sent: int = 0
    skipped: int = 0  # not sent: the protocol reached its finding limit
    findings: int = 0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class FuzzConfig:
    per_protocol: int = 200
    seed: int = 0
    max_findings_per_protocol: int = 2  # then the rest of that protocol's inputs are skipped
    confirm_suspects: int = 3  # replay up to this many suspects alone, newest first, to find the culprit
    suspects: int = 8
    read_timeout: float = 1.0
    raw_timeout: float = 1.0
    honest_interval: float = 5.0
    stale_after: float = 15.0
    memory_factor: float = 2.0
    memory_slack_kib: int = 200 * 1024
    daemon_seconds: float = 1800.0  # each daemon's --duration: a daemon left behind stops by itself


@dataclass
class Report:
    stats: dict[str, ProtocolStats]
    findings: list[Finding]
    honest: list[HonestRound]
    generations: list[Generation]
    seconds: float
    record_path: Path
    final: str = ""  # the daemon's state at the end: "alive, status written 0.4 s ago" or why not

    def memory_failures(self, config: FuzzConfig) -> list[str]:
        out = []
        for i, gen in enumerate(self.generations, 1):
            bound = config.memory_factor * gen.baseline_rss_kib + config.memory_slack_kib
            if gen.baseline_rss_kib and gen.peak_hwm_kib > bound:
                out.append(
                    f"daemon #{i} (pid {gen.pid}) peaked at {gen.peak_hwm_kib / 1024:.0f} MiB resident, over "
                    f"{config.memory_factor:g} x {gen.baseline_rss_kib / 1024:.0f} MiB + {config.memory_slack_kib // 1024} MiB"
                )
        return out

    def failures(self, config: FuzzConfig) -> list[str]:
        """Every way the pass criteria were missed, each with its evidence."""
        out = [f.describe() for f in self.findings]
        died = {i for i, gen in enumerate(self.generations, 1) if gen.ended and gen.ended != "stopped"}
        lost = [r for r in self.honest if not r.ok and r.generation not in died]  # else: part of a finding
        out += [f"honest peer not served ({r.phase}, daemon #{r.generation}): {r.detail}" for r in lost]
        if not any(r.ok for r in self.honest if r.phase == "after"):
            out.append("the honest peer was not served after fuzzing")
        during = [r for r in self.honest if r.phase == "during"]
        if during and not any(r.ok for r in during):  # none at all: the campaign was shorter than one interval
            out.append(f"the honest peer was served in none of {len(during)} rounds during fuzzing")
        if not self.final.startswith("alive"):
            out.append(f"at the end the daemon is {self.final}")
        return out + self.memory_failures(config)

    def summary(self) -> str:
        lines = [f"{'protocol':<26}{'sent':>7}{'skipped':>8}{'inputs/s':>9}{'findings':>9}  outcomes"]
        for s in self.stats.values():
            outcomes = ", ".join(f"{k} {v}" for k, v in s.outcomes.most_common())
            lines.append(f"{s.protocol:<26}{s.sent:>7}{s.skipped:>8}{s.rate:>9.1f}{s.findings:>9}  {outcomes}")
        for i, gen in enumerate(self.generations, 1):
            lines.append(
                f"daemon #{i} pid {gen.pid}: resident {gen.baseline_rss_kib / 1024:.1f} MiB before fuzzing, "
                f"peak (VmHWM) {gen.peak_hwm_kib / 1024:.1f} MiB, last {gen.last_rss_kib / 1024:.1f} MiB; "
                f"{gen.sessions} sessions, {gen.raw} raw connections; {gen.ended or 'running'}"
            )
        ok = {p: sum(r.ok for r in self.honest if r.phase == p) for p in ("during", "after")}
        total = {p: sum(r.phase == p for r in self.honest) for p in ("during", "after")}
        lines.append(
            f"honest peer served: during {ok['during']}/{total['during']} rounds, after {ok['after']}/{total['after']}"
        )
        lines.append(f"daemon exits or wedges: {len(self.findings)}; at the end: {self.final}")
        causes = Counter((f.protocol, f.signature) for f in self.findings)
        lines += [f"  {n} x on {protocol}: {cause}" for (protocol, cause), n in causes.items()]
        lines.append(
            f"{sum(s.sent for s in self.stats.values())} inputs in {self.seconds:.1f} s; recorded in {self.record_path}"
        )
        return "\n".join(lines)


def honest_config():
    from p2paudit.node.libp2p_adapter import NodeConfig

    return NodeConfig(
        listen=("/ip4/127.0.0.1/tcp/0",), peer_exchange_interval=3600.0, peer_exchange_max_interval=3600.0
    )


class Campaign:
    """Sends cases to the target one at a time, probing after each; restarts the daemon after a finding."""

    def __init__(
        self,
        target: Target,
        corpus: Corpus,
        config: FuzzConfig,
        record_path: Path,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.target, self.corpus, self.config = target, corpus, config
        self.record_path = record_path
        self.progress = progress or (lambda line: None)
        self.session: Session | None = None
        self.sessions = 0
        self.findings: list[Finding] = []
        self.stats: dict[str, ProtocolStats] = {}
        self.honest: Honest | None = None
        self.nursery: trio.Nursery | None = None
        self.began = time.monotonic()
        self._restarting = False

    # -- identities and probes ------------------------------------------------------------------------------

    async def renew(self) -> bool:
        """A fresh identity's connection to the target (the old one may be banned)."""
        if self.session is not None:
            self.session.close()
        self.sessions += 1
        seed = hashlib.sha256(b"p2paudit fuzz session %d %d" % (self.config.seed, self.sessions)).digest()
        session = Session(seed)
        try:
            await self.nursery.start(session.run, self.target.info)
        except Exception:  # refused or timed out: no session
            self.session = None
            return False
        self.session = session
        self.target.generations[-1].sessions += 1
        return True

    async def probe(self, fresh: bool = False) -> str:
        """ "ok" if the daemon answers a ping (from a fresh identity if need be, or if `fresh`: a daemon that
        serves the peers it has but admits no new one is wedged too); else "exit" or "wedged"."""
        if not self.target.alive():
            return "exit"
        if not fresh and self.session is not None and await ping(self.session.host, self.target.info.peer_id):
            return "ok"
        for _ in range(3):
            if not self.target.alive():
                return "exit"
            if await self.renew() and await ping(self.session.host, self.target.info.peer_id):
                return "ok"
            await trio.sleep(0.5)
        with trio.move_on_after(10):  # unreachable: dying, or wedged
            while self.target.alive():
                await trio.sleep(0.2)
        return "wedged" if self.target.alive() else "exit"

    async def deliver(self, case: Case) -> str:
        if case.protocol in RAW_PROTOCOLS:
            self.target.generations[-1].raw += 1
            return await send_raw("127.0.0.1", self.target.port, case, self.corpus, self.config.raw_timeout)
        read_timeout = 0.0 if case.protocol in MESHSUB else self.config.read_timeout
        for attempt in range(2):
            if self.session is None and not await self.renew():
                return "no-session"
            outcome = await send_stream(self.session.host, self.target.info.peer_id, case, read_timeout)
            if not outcome.startswith("no-stream") or attempt or await self.probe() != "ok":
                return outcome
        return outcome

    # -- the daemon's life ----------------------------------------------------------------------------------

    async def restart(self, how: str) -> None:
        self._restarting = True
        try:
            if self.session is not None:
                self.session.close()
                self.session = None
            await trio.to_thread.run_sync(self.target.end, how)
            await trio.to_thread.run_sync(self.target.start)
            await trio.sleep(1.0)
            self.target.set_baseline()
        finally:
            self._restarting = False

    def _detail(self, verdict: str) -> str:
        if verdict == "exit":
            return f"process exited with code {self.target.proc.poll()}"
        if verdict == "wedged":
            gen = self.target.generations[-1]
            return (
                f"process alive, but no fresh identity could connect and ping it for 10 s; it had taken "
                f"{gen.sessions} libp2p sessions and {gen.raw} raw TCP connections from us"
            )
        return f"status file not rewritten for {self.target.status_age():.0f} s"

    async def _found(self, verdict: str, protocol: str, suspects: list[Case]) -> Finding:
        if verdict == "exit":
            await trio.sleep(0.5)  # let the dying process finish its traceback
        finding = Finding(
            verdict, protocol, suspects, self._detail(verdict), self.target.log_tail(60), len(self.target.generations)
        )
        self.findings.append(finding)
        self.progress(
            f"FOUND: {finding.kind} ({finding.detail}) on {protocol}; last input "
            f"{suspects[-1].describe(120) if suspects else '-'}"
        )
        await self.restart(f"{verdict}: {finding.detail}")
        return finding

    async def _check(self, verdict: str, sent: int) -> str:
        """Every 25 inputs also: memory, the status file's age, and a connection from a fresh identity."""
        if verdict == "ok" and sent % 25 == 0:
            self.target.sample_memory()
            age = self.target.status_age()
            if age is not None and age > self.config.stale_after:
                return "stale"
            return await self.probe(fresh=True)
        return verdict

    # -- sending --------------------------------------------------------------------------------------------

    async def send_cases(self, cases: list[Case], stats: ProtocolStats, max_findings: float) -> None:
        recent: deque[Case] = deque(maxlen=self.config.suspects)
        started = time.monotonic()
        with open(self.record_path, "a") as record:
            for i, case in enumerate(cases):
                if stats.findings >= max_findings:
                    stats.skipped = len(cases) - i
                    break
                outcome = await self.deliver(case)
                recent.append(case)
                stats.sent += 1
                stats.outcomes[outcome.split()[0]] += 1
                verdict = await self._check(await self.probe(), stats.sent)
                item = {**case.to_json(), "outcome": outcome, "probe": verdict, "daemon": len(self.target.generations)}
                record.write(json.dumps(item) + "\n")
                if verdict != "ok":
                    record.flush()
                    stats.findings += 1
                    await self._found(verdict, case.protocol, list(recent))
                    recent.clear()
        stats.seconds += time.monotonic() - started
        self.target.sample_memory()

    async def confirm(self, finding: Finding) -> None:
        """Replay the suspects one at a time, newest first, each followed by a probe (and a second after a
        pause, for a late death): the first that ends the daemon alone is the culprit."""
        for case in list(reversed(finding.suspects))[: self.config.confirm_suspects]:
            outcome = await self.deliver(case)
            verdict = await self.probe()
            if verdict == "ok":
                await trio.sleep(1.0)
                verdict = await self.probe()
            if verdict != "ok":
                finding.confirmed = case
                finding.confirm_detail = f"alone it gave: {outcome}, then {verdict} ({self._detail(verdict)})"
                await trio.sleep(0.5)
                finding.log_tail = self.target.log_tail(60)
                await self.restart(f"{verdict} (confirming)")
                return
        tried = min(len(finding.suspects), self.config.confirm_suspects)
        finding.confirm_detail = f"none of the last {tried} inputs alone stopped a fresh daemon (suspects recorded)"

    async def _final_state(self) -> str:
        age = self.target.status_age()
        if not self.target.alive():
            return f"gone (exit code {self.target.proc.poll()})"
        if age is None or age > 5.0:
            return f"up but its status file is {'unreadable' if age is None else f'{age:.0f} s old'}"
        if await self.probe(fresh=True) != "ok":
            return f"up but it admits no new peer ({self._detail('wedged')})"
        return f"alive, status written {age:.1f} s ago, a new peer admitted"

    async def _honest_loop(self) -> None:
        while True:
            await trio.sleep(self.config.honest_interval)
            if not self._restarting:
                await self.honest.round("during", self.began)

    # -- a whole campaign -----------------------------------------------------------------------------------

    async def run(self, protocols: Iterable[str], cases: list[Case] | None = None) -> Report:
        """Fuzz each protocol in turn (or send `cases`, a replay); then confirm findings and check the honest
        peer once more."""
        from p2paudit.node.libp2p_adapter import open_node

        self.began = time.monotonic()
        honest_key = identity_from_seed(_key("honest node"))
        async with open_node(honest_key, honest_config()) as node:
            self.honest = Honest(node, self.target, self.corpus)
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                first = await self.honest.round("before", self.began, timeout=40.0)
                self.progress(f"honest peer before fuzzing: {first.detail}")
                self.target.set_baseline()
                nursery.start_soon(self._honest_loop)
                await self._send_all(protocols, cases)
                confirmed = set()
                for finding in list(self.findings):  # the first of each cause on each protocol
                    if (finding.protocol, finding.signature) not in confirmed:
                        confirmed.add((finding.protocol, finding.signature))
                        await self.confirm(finding)
                after = await self.honest.round("after", self.began)
                self.progress(f"honest peer after fuzzing: {after.detail}")
                self.final = await self._final_state()
                self.target.sample_memory()
                nursery.cancel_scope.cancel()
        return Report(
            self.stats,
            self.findings,
            self.honest.rounds,
            self.target.generations,
            time.monotonic() - self.began,
            self.record_path,
            self.final,
        )

    async def _send_all(self, protocols: Iterable[str], cases: list[Case] | None) -> None:
        replay = cases is not None  # a replay sends every case, whatever happens
        for protocol in dict.fromkeys(c.protocol for c in cases) if replay else protocols:
            if replay:
                planned, limit = [c for c in cases if c.protocol == protocol], float("inf")
            else:
                planned = make_cases(protocol, self.corpus, self.config.seed, self.config.per_protocol)
                limit = self.config.max_findings_per_protocol
            stats = self.stats[protocol] = ProtocolStats(protocol, len(planned))
            await self.send_cases(planned, stats, limit)
            self.progress(
                f"{protocol}: {stats.sent} sent in {stats.seconds:.1f} s ({stats.rate:.0f}/s), "
                f"{stats.findings} finding(s), {stats.skipped} skipped"
            )


async def fuzz_daemon(
    run_dir: Path,
    work: Path,
    protocols: Iterable[str] = ALL_PROTOCOLS,
    config: FuzzConfig = FuzzConfig(),
    cases: list[Case] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Start a daemon on `run_dir` (home under `work`), fuzz it (or replay `cases`), stop it; the report.

    Inputs and outcomes are appended to work/fuzz-inputs.jsonl as they are sent; the findings, with their
    suspects and log tails, go to work/fuzz-findings.json."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus(run_dir, work)
    target = Target(work / "daemon", run_dir, config.daemon_seconds)
    record_path = work / "fuzz-inputs.jsonl"
    await trio.to_thread.run_sync(target.start)
    try:
        report = await Campaign(target, corpus, config, record_path, progress).run(protocols, cases)
    finally:
        target.end("stopped")
    findings = [f.to_json() for f in report.findings]
    (work / "fuzz-findings.json").write_text(json.dumps(findings, indent=1))
    return report
