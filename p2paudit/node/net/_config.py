"""Settings and events of the libp2p adapter (adapter-internal; the face, node/net/__init__, re-exports them)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, TypedDict

# Reachability, in our terms (_reach): what dial-backs by peers said about our address.
PUBLIC = "public"
BEHIND_NAT = "behind-nat"
UNKNOWN = "unknown"
# How a connected peer is reached: directly, only through a relay, or directly after a hole punch (DCUtR).
DIRECT = "direct"
RELAYED = "relayed"
HOLE_PUNCHED = "hole-punched"


class Ban(TypedDict):
    """A ban in force (Node.bans, the status file's "bans"): the peer, why, and its end in unix seconds."""

    peer: str
    reason: str
    until: float


@dataclass(frozen=True)
class RelayServiceLimits:
    """What a node offering circuit relay v2 (`--relay-service`) gives its peers (docs/network.md, threat model).

    A reservation is held for the connection's own peer only, while it stays connected; new reservations
    are rate limited per peer (a bucket of `reservation_burst`, one more every `reservation_interval` s).
    Circuits are counted at both ends; each one is cut after `circuit_seconds` or `circuit_bytes`
    (both directions together).
    """

    reservations: int = 64
    reservations_per_ip: int = 4
    reservation_burst: int = 3
    reservation_interval: float = 120.0
    reservation_ttl: int = 900
    circuits: int = 16
    circuits_per_peer: int = 4
    circuit_seconds: int = 600
    circuit_bytes: int = 64 << 20


@dataclass(frozen=True)
class ReachConfig:
    """How the node gets reached (_reach; measurements in docs/reachability.md).

    announce: multiaddrs peers are told instead of the bound ones (a public address, a port forward).
    relay_service: offer circuit relay v2 to peers, within relay_limits.
    max_relays: relays a node that is not public reserves a slot on (0: never reserve).
    hole_punch: run DCUtR, which upgrades a relayed connection to a direct one where both NATs allow.
    reserve_after_unknown: a node still unknown after this long, with no inbound direct connection,
    reserves anyway (one failed dial-back is enough sooner).
    dialback_alone_after: a round in which only one peer answered for this long is decided by that answer
    (a volunteer told only its bootstrap node reaches every other peer through it: no second answer comes).
    connections_per_peer: 2 lets a hole-punched connection arrive beside the relayed one without the
    swarm trimming either (streams on the relayed one survive); its price is py-libp2p's fixed 0.25 s
    happy-eyeballs wait in every connect (1 skips it).
    """

    announce: tuple[str, ...] = ()
    relay_service: bool = False
    relay_limits: RelayServiceLimits = RelayServiceLimits()
    max_relays: int = 2
    hole_punch: bool = True
    dialback: bool = True
    dialback_peers: int = 3
    dialback_timeout: float = 5.0
    recheck_interval: float = 1800.0
    reserve_after_unknown: float = 120.0
    dialback_alone_after: float = 30.0
    connections_per_peer: int = 2
    hole_punch_dial_timeout: int = 3


@dataclass(frozen=True)
class NodeConfig:
    """Everything the adapter bounds or times. Addresses are multiaddr strings.

    listen: addresses to bind (tests: loopback only; port 0 picks a free one).
    bootstrap: /p2p/ multiaddrs kept for good and redialled with back-off.
    """

    listen: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    bootstrap: tuple[str, ...] = ()
    dial_timeout: float = 5.0
    redial_min: float = 0.5
    redial_max: float = 60.0
    max_peers: int = 50
    # Connections at once, inbound ones included (py-libp2p admits max_connections - min_connections inbound).
    max_connections: int = 300
    # Peer exchange: how often we ask every connected peer, and how much it may say.
    peer_exchange_interval: float = 2.0
    peer_exchange_max_interval: float = 60.0
    max_peer_list: int = 64
    max_addrs_per_peer: int = 8
    exchanged_addr_ttl: int = 3600
    ban_seconds: float = 600.0
    # mDNS discovery on the local network (multicast on the real interface: never in tests).
    mdns: bool = False
    # Serve the DHT (provider records). False for a node that lives for seconds (`p2paudit announce`).
    dht_server: bool = True
    # Gossip. The library default heartbeat is 120 s; ~1 s keeps the mesh fresh.
    heartbeat_interval: int = 1
    mesh_degree: int = 4
    mesh_degree_low: int = 3
    mesh_degree_high: int = 8
    # Both of py-libp2p's 32-message queues are raised to this.
    queue_size: int = 4096
    max_gossip_message: int = 1 << 20
    # A peer's pubsub stream is not read while this many of its messages are in processing (back-pressure,
    # memory bounded per peer); with that bound, validation may wait this long instead of py-libp2p's 5 s.
    max_in_flight_per_peer: int = 32
    validation_timeout: float = 60.0
    deliveries_clear_interval: float = 30.0
    # Our subscriptions are re-announced to a peer whose pubsub stream is new (the library's
    # hello can miss a topic subscribed during the handshake) and to every peer this often.
    subscription_refresh_interval: float = 30.0
    max_seen_ids: int = 1 << 17
    # Our per-origin rate limit (the library's counts forwarders and throttles relays).
    # None turns it off. Over the limit a message is rejected: not delivered, not forwarded.
    origin_rate: float | None = 100.0
    origin_burst: float = 1000.0
    max_tracked_origins: int = 10_000
    # Request/response.
    max_request: int = 1 << 20
    max_requests_per_peer: int = 4
    # Announced addresses, dial-back, relays and hole punching.
    reach: ReachConfig = ReachConfig()


@dataclass(frozen=True)
class NodeEvent:
    """What the daemon may show or act on.

    kind: connected, disconnected, banned, unbanned (peer = that peer);
    refused (a request from peer was oversize, malformed, or timed out);
    rejected, validator_errors, rate_limited (peer = the gossip forwarder; detail names the origin);
    malformed (peer sent bytes that do not decode on some protocol: provably bad),
    contained (an exception caught at a stream or library task: a network failure or a bug, not the
    peer's fault; the log has its traceback).
    validator_errors is our validator's own bug: never the peer's fault either.
    """

    kind: str
    peer: str
    detail: str = ""


@dataclass(frozen=True)
class PeerLink:
    """How one connected peer is reached: kind is DIRECT, RELAYED or HOLE_PUNCHED; relay names the relay
    carrying a relayed link (None for direct ones)."""

    peer: str
    kind: str
    relay: str | None = None


@dataclass(frozen=True)
class RelayServiceState:
    """A relay service's load now, what it refused and how many bytes it relayed since it started."""

    reservations: int
    circuits: int
    refused: int
    relayed_bytes: int = 0


@dataclass(frozen=True)
class Reachability:
    """The node's reachability in our terms (Node.reachability()).

    state: PUBLIC, BEHIND_NAT or UNKNOWN (what dial-backs by peers decided: 2 agreeing answers, or the only
    answer of a round after ReachConfig.dialback_alone_after).
    addresses: what peers are told (identify, peer exchange). relays: the relays carrying us (reservations
    held) and carrying relayed links. dialbacks: the latest answers, one line each.
    """

    state: str
    addresses: tuple[str, ...]
    relays: tuple[str, ...]
    reservations: tuple[str, ...]
    links: tuple[PeerLink, ...]
    dialbacks: tuple[str, ...]
    relay_service: RelayServiceState | None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types, for the status file."""
        return asdict(self)
