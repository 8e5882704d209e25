"""The peer-exchange answer of /p2paudit/peers/1.0.0 (adapter-internal).

Bytes: a msgpack array of [peer_id: str, addrs: array of str] pairs, or a
msgpack str: a refusal and its reason. The reader bounds the count of peers
and of addresses, checks every type, and drops entries whose peer id or
address does not parse (a peer's list is a hint).
"""

from __future__ import annotations

import msgpack
import multiaddr
from libp2p.peer.id import ID

from p2paudit.errors import InputError
from p2paudit.node.wire import MAX_TEXT, PeerRefused, clip_text

_MAX_STRING = 512


def encode_peer_list(entries: list[tuple[str, list[str]]]) -> bytes:
    packed: bytes = msgpack.packb([[peer, list(addrs)] for peer, addrs in entries], use_bin_type=True)  # untyped lib
    return packed


def encode_peer_refusal(reason: str) -> bytes:
    packed: bytes = msgpack.packb(clip_text(reason), use_bin_type=True)  # msgpack is untyped: packb gives bytes
    return packed


def decode_peer_list(data: bytes, max_peers: int, max_addrs: int) -> list[tuple[str, list[str]]]:
    """The (peer, addresses) pairs of a peer list; InputError if its shape is wrong."""
    try:
        value = msgpack.unpackb(data, raw=False, max_str_len=_MAX_STRING, max_array_len=max(max_peers, max_addrs, 2))
    except Exception as error:  # msgpack raises several unrelated exception types
        raise InputError(f"peer list is not msgpack: {error}") from None
    if isinstance(value, str):
        raise PeerRefused(f"peer refused the peer-exchange request: {value[:MAX_TEXT]}")
    if not isinstance(value, list) or len(value) > max_peers:
        raise InputError(f"peer list must be an array of at most {max_peers} entries")
    out = []
    for entry in value:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)):
            raise InputError("peer list entry must be [peer id, [addresses]]")
        peer, addrs = entry
        if not isinstance(addrs, list) or len(addrs) > max_addrs or not all(isinstance(a, str) for a in addrs):
            raise InputError(f"peer list entry must carry at most {max_addrs} address strings")
        try:
            ID.from_base58(peer)
            good = [a for a in addrs if _is_tcp_addr(a)]
        except Exception:  # a malformed hint is skipped, not fatal
            continue
        if good:
            out.append((peer, good))
    return out


def _is_tcp_addr(addr: str) -> bool:
    try:
        parsed = multiaddr.Multiaddr(addr)
        parsed.value_for_protocol("tcp")
    except Exception:
        return False
    return True
