"""The network: the one part of p2paudit.node that meets py-libp2p 0.8.1 (and multiaddr, and protobuf).

This `__init__` is the face: everything the rest of the node uses is imported from here, and
nothing outside node/net imports one of its private modules (tests/layering_rules.py holds it).
The rest of the node speaks our terms through `open_node` and `Node`: peers are base58 peer-id
strings, addresses are multiaddr strings, payloads are opaque bytes.

Inside, each module one job: `_adapter` (the Node, holding its parts), `_open` (`open_node`), `_host` (the
Noise-only host, peer-id gating), `_inbound` (the library's inbound-stream hook), `_dialling`
(bans, dialling, bootstrap redial), `_discovery` (peer exchange, DHT), `_peers` (peer-exchange
encoding), `_gossip` and `_pubsub` (GossipSub set up to lose nothing), `_requests` and
`_framing` (framed request/response, the token bucket), `_reach` (reachability: listening,
announced and observed addresses), `_dialback` (a peer dials us back to tell whether we are
reachable), `_relay` (circuit relay for a node behind a NAT), `_containment` (the wall that
keeps any peer's input from ending the node) and `_config` (the node's settings and events).
Why each library setting is what it is: those modules' docstrings and
shared/notes/py-libp2p-0.8.1.md.
"""

from p2paudit.node.net._adapter import LIBRARY_LOGGERS, Node
from p2paudit.node.net._addresses import check_announce
from p2paudit.node.net._config import (
    Ban,
    NodeConfig,
    NodeEvent,
    PeerLink,
    Reachability,
    ReachConfig,
    RelayServiceLimits,
)
from p2paudit.node.net._containment import supervise
from p2paudit.node.net._discovery import PEERS_PROTOCOL
from p2paudit.node.net._framing import TokenBucket
from p2paudit.node.net._gossip import IGNORE
from p2paudit.node.net._open import open_node
from p2paudit.node.net._requests import BadResponse, RequestFailed, RequestHandler, RequestTimedOut

__all__ = [
    "IGNORE",
    "LIBRARY_LOGGERS",
    "PEERS_PROTOCOL",
    "BadResponse",
    "Ban",
    "Node",
    "NodeConfig",
    "NodeEvent",
    "PeerLink",
    "ReachConfig",
    "Reachability",
    "RelayServiceLimits",
    "RequestFailed",
    "RequestHandler",
    "RequestTimedOut",
    "TokenBucket",
    "check_announce",
    "open_node",
    "supervise",
]
