"""Settings and events of the libp2p adapter (adapter-internal; re-exported by libp2p_adapter)."""

from __future__ import annotations

from dataclasses import dataclass


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
