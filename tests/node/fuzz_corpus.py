"""Valid messages to start from.

Part of the fuzzing harness of fuzz_peer.py. Real attestations of the run, wire messages, pubsub, Kademlia,
identify and Noise seeds.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgpack
import multiaddr
from fuzz_inputs import (
    IDENTIFY,
    IDENTIFY_PUSH,
    KAD,
    MESHSUB,
    MS_HEADER,
    NOISE_MSG1,
    NOISE_MSG3,
    NOISE_PAYLOAD,
    PEERS,
    PING,
    SETTLED,
    SYNC,
    TCP,
    WITNESS,
    YAMUX,
    ms_line,
    noise_frame,
    yamux_frame,
)
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import X25519PrivateKey
from libp2p.identity.identify.pb.identify_pb2 import Identify
from libp2p.identity_utils import create_identity_from_seed
from libp2p.kad_dht.pb.kademlia_pb2 import Message as KadMessage
from libp2p.kad_dht.pb.kademlia_pb2 import Record as KadRecord
from libp2p.peer.envelope import seal_record
from libp2p.peer.id import ID
from libp2p.peer.peer_record import PeerRecord
from libp2p.pubsub.pb import rpc_pb2
from libp2p.security.noise.messages import NoiseHandshakePayload, make_handshake_payload_sig

from p2paudit.attest.audits import attestation_from_audit
from p2paudit.attest.record import sign_attestation
from p2paudit.attest.store import AttestationStore, origin_for
from p2paudit.audit.replay import open_run
from p2paudit.identity import Identity, identity_from_seed
from p2paudit.node import wire
from p2paudit.node.assign.auditor import AuditPolicy, replay_step
from p2paudit.node.protocols import witness

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


def fuzz_key(label: str) -> bytes:
    return hashlib.sha256(b"p2paudit fuzz " + label.encode()).digest()


def build_corpus(run_dir: Path, scratch: Path) -> Corpus:
    """Replay step 0 of the run (as the daemon does), sign it with fuzz keys, and build one valid message of
    each kind from it. Deterministic: the same run gives the same corpus."""
    view = open_run(run_dir)
    run_id, steps = view.manifest.run_id, view.manifest.num_steps
    audits = replay_step(view, 0, "reference", AuditPolicy())
    author = identity_from_seed(fuzz_key("author"))
    envelopes = [_signed(author, a, 1_700_000_000_000) for a in audits]
    cheat = identity_from_seed(fuzz_key("cheat"))
    step = next(a for a in audits if a.subject == "step")
    lie = replace(step, observed_digest=hashlib.sha256(b"fuzz lie").digest(), verdict="mismatch", findings=("state",))
    evidence = wire.encode_evidence(wire.Evidence("equivocation", _signed(cheat, step, 1), _signed(cheat, lie, 2)))
    batch = wire.encode_batch(wire.GossipBatch(run_id, tuple(envelopes)))
    corpus = Corpus(
        run_id=run_id,
        topic=wire.run_topic(run_id),
        author=create_identity_from_seed(fuzz_key("author")),
        noise_static=fuzz_key("noise static"),
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
        IDENTIFY: identify_seeds(corpus),
        IDENTIFY_PUSH: identify_seeds(corpus),
        PING: [hashlib.sha256(b"ping").digest()],
        TCP: [MS_HEADER + ms_line(p) for p in (b"/noise", b"/yamux/1.0.0", b"ls", b"/tls/1.0.0")] + [MS_HEADER],
        NOISE_MSG1: [noise_frame(fuzz_key("e")), noise_frame(fuzz_key("e") + b"early data")],
        NOISE_MSG3: [
            noise_frame(
                fuzz_key("s")
                + fuzz_key("s")[:16]
                + noise_payload(corpus.author, corpus.noise_static)
                + fuzz_key("t")[:16]
            )
        ],
        NOISE_PAYLOAD: [noise_payload(corpus.author, corpus.noise_static)],
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


def identify_seeds(corpus: Corpus) -> list[bytes]:
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


def noise_payload(key_pair: KeyPair, static_private: bytes) -> bytes:
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
