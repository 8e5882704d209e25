"""Host plumbing for the libp2p adapter: parsing, a Noise-only host with peer-id gating (adapter-internal).

py-libp2p's connection gate filters by IP only (useless on loopback, and too
coarse anywhere), so a banned peer is refused inside the Noise handshake
(`GatedNoise`): outbound before dialling, inbound as soon as the peer has
proved its id. A refused handshake never becomes a connection.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import multiaddr
import trio
from libp2p import new_host
from libp2p.abc import IHost, INetConn, INetStream, INetwork, INotifee, IRawConnection, ISecureConn
from libp2p.crypto.keys import KeyPair
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.exceptions import BaseLibp2pError
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.security.exceptions import HandshakeFailure
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux

from p2paudit.errors import InputError
from p2paudit.node.net._containment import FaultReport, background_contained_service, contain_streams
from p2paudit.node.net._inbound import release_inbound_slots

# What a failing network operation raises in py-libp2p 0.8.1 and trio.
NETWORK_ERRORS = (BaseLibp2pError, trio.BrokenResourceError, trio.ClosedResourceError, OSError)


def parse_peer_id(peer: str) -> ID:
    """A peer id from its base58 text; InputError if it is not one."""
    try:
        return ID.from_base58(peer)
    except Exception as error:  # base58 and multihash raise assorted ValueErrors
        raise InputError(f"not a peer id: {peer[:80]!r}") from error


def parse_peer_addr(addr: str) -> PeerInfo:
    """PeerInfo from a multiaddr ending in /p2p/<peer id>; InputError otherwise."""
    try:
        return info_from_p2p_addr(multiaddr.Multiaddr(addr))
    except Exception as error:  # multiaddr raises several unrelated exception types
        raise InputError(f"peer address {addr[:200]!r} is not a multiaddr ending in /p2p/<peer id>") from error


def parse_listen_addr(addr: str) -> multiaddr.Multiaddr:
    try:
        return multiaddr.Multiaddr(addr)
    except Exception as error:  # multiaddr raises several unrelated exception types
        raise InputError(f"listen address {addr[:200]!r} is not a multiaddr") from error


def dht_key(key: bytes) -> str:
    """KadDHT takes a hex multihash string: sha2-256 (0x12), 32 bytes (0x20), of our key under a prefix."""
    return "1220" + hashlib.sha256(b"p2paudit/dht/" + key).hexdigest()


class GatedNoise(NoiseTransport):
    """Noise that refuses banned peers (outbound before the handshake, inbound right after it) and peers
    whose identity key is not Ed25519 (our identities are Ed25519: a secp256k1 or RSA peer id has no key
    that signs attestations or ledger checkpoints, so nothing it could say would be checkable)."""

    def __init__(self, key_pair: KeyPair, is_banned: Callable[[ID], bool]) -> None:
        super().__init__(key_pair, noise_privkey=create_x25519_key_pair().private_key)
        self._is_banned = is_banned

    async def secure_inbound(self, conn: IRawConnection) -> ISecureConn:
        secure = await super().secure_inbound(conn)
        if self._is_banned(secure.get_remote_peer()):
            await secure.close()
            raise HandshakeFailure(f"peer {secure.get_remote_peer()} is banned")
        return await _ed25519_only(secure)

    async def secure_outbound(self, conn: IRawConnection, peer_id: ID) -> ISecureConn:
        if self._is_banned(peer_id):
            await conn.close()
            raise HandshakeFailure(f"peer {peer_id} is banned")
        return await _ed25519_only(await super().secure_outbound(conn, peer_id))


# A peer id of an Ed25519 key: the identity multihash (0x00, length 36) of the key's protobuf
# (field 1 = KeyType Ed25519 (1), field 2 = 32 key bytes). Noise derives the remote id from the
# identity key the peer signed its handshake with, so this is that key's type.
_ED25519_PEER_ID = bytes.fromhex("002408011220")


def is_ed25519_peer(peer_id: ID) -> bool:
    raw = peer_id.to_bytes()
    return len(raw) == len(_ED25519_PEER_ID) + 32 and raw.startswith(_ED25519_PEER_ID)


async def _ed25519_only(secure: ISecureConn) -> ISecureConn:
    peer = secure.get_remote_peer()
    if not is_ed25519_peer(peer):
        await secure.close()
        raise HandshakeFailure(f"peer {peer} does not have an Ed25519 identity key")
    return secure


def build_host(
    key_pair: KeyPair,
    listen: list[multiaddr.Multiaddr],
    dial_timeout: float,
    is_banned: Callable[[ID], bool],
    mdns: bool = False,
    max_connections: int = 300,
    connections_per_peer: int = 1,
) -> IHost:
    """Noise only (the default set admits plaintext), yamux, `connections_per_peer` connections per peer.

    One connection per peer spares every connect the swarm's fixed 0.25 s
    happy-eyeballs wait; two let a hole-punched connection arrive beside a
    relayed one (_config.ReachConfig). mDNS is off unless asked for
    (`--mdns`, on a LAN): it multicasts on the real interface, so tests never
    turn it on outside a private network namespace.
    """
    host = new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: GatedNoise(key_pair, is_banned)},
        muxer_opt={TProtocol(YAMUX_PROTOCOL_ID): Yamux},
        listen_addrs=listen,
        # min_connections and low_watermark 0: py-libp2p's auto-connector keeps at least that many
        # connections by dialling whatever its peerstore holds, and peers fill the peerstore (identify,
        # Kademlia, peer records): it made a node dial addresses strangers chose. Our own loops dial.
        connection_config=ConnectionConfig(
            max_connections_per_peer=connections_per_peer,
            dial_timeout=dial_timeout,
            max_connections=max_connections,
            min_connections=0,
            low_watermark=0,
            high_watermark=max_connections,
        ),
        enable_mDNS=mdns,
    )
    release_inbound_slots(host.get_network())
    return host


@asynccontextmanager
async def run_host(host: IHost, listen: list[multiaddr.Multiaddr], report: FaultReport) -> AsyncIterator[None]:
    """What `host.run(listen)` does (the swarm as a service, listening, mDNS), with the swarm's tasks and
    every inbound stream contained (_containment): no peer's bytes can cancel the swarm."""
    contain_streams(host, report)
    network = host.get_network()
    async with background_contained_service(network, report):
        await network.listen(*listen)
        if host.mDNS is not None:  # type: ignore[attr-defined]  # BasicHost's; IHost does not declare it
            host.mDNS.start()  # type: ignore[attr-defined]  # (the same)
        try:
            yield
        finally:
            await host._shutdown_background_services()  # type: ignore[attr-defined]  # BasicHost's, not IHost's


class Notifee(INotifee):
    """Forwards connect and disconnect notifications to two plain callbacks."""

    def __init__(self, on_connected: Callable[[ID], None], on_disconnected: Callable[[ID], None]) -> None:
        self._on_connected = on_connected
        self._on_disconnected = on_disconnected

    async def opened_stream(self, network: INetwork, stream: INetStream) -> None:
        pass

    async def closed_stream(self, network: INetwork, stream: INetStream) -> None:
        pass

    async def connected(self, network: INetwork, conn: INetConn) -> None:
        self._on_connected(conn.muxed_conn.peer_id)

    async def disconnected(self, network: INetwork, conn: INetConn) -> None:
        self._on_disconnected(conn.muxed_conn.peer_id)

    async def listen(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        pass

    async def listen_close(self, network: INetwork, multiaddr: multiaddr.Multiaddr) -> None:
        pass
