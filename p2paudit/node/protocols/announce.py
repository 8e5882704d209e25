"""Run announcements: a lab tells the network where its run lives; volunteers who follow the lab's key audit it.

An announcement is one canonical msgpack array (the rules of node.wire):

    ["p2paudit/announce", 1, run_id (bin 32), [url (str), ... 1..4], publisher (bin 32), time_ms (int), signature (bin 64)]

signed by `publisher` (Ed25519) over b"p2paudit/announce/v1" 0x00 followed by the
encoding of the same array without its signature. Anyone checks it from the
bytes alone; a follower then fetches the manifest at a URL and refuses the run
unless its run id is the announced one and the manifest is signed by the same
key (`check_manifest`), so an announcement can point only at a run its
publisher signed. Each URL is http or https with a host, at most 512
characters; a whole announcement at most MAX_ANNOUNCE_BYTES.

Announcements travel on RUNS_TOPIC and, for nodes that join later, on
ANNOUNCEMENTS_PROTOCOL (one request: the publisher keys the asker follows; one
answer: the announcements this node holds by those keys, newest last).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from p2paudit.identity import Identity, sign, verify_signature
from p2paudit.node.wire import (
    HASH_SIZE,
    MAX_TEXT,
    VERSION,
    PeerRefused,
    ProtocolSpec,
    WireError,
    check_bin,
    check_fields,
    check_int,
    check_list,
    check_text,
    clip_text,
    pack,
    unpack_message,
)

if TYPE_CHECKING:
    from p2paudit.node.net import Node


class SignedRun(Protocol):
    """What an announcement is checked against: a fetched run's checked manifest (an engine run's or a lab's)."""

    @property
    def run_id(self) -> bytes: ...

    @property
    def public_key(self) -> bytes: ...


MAGIC_ANNOUNCE = "p2paudit/announce"
MAGIC_ANNOUNCEMENTS = "p2paudit/announcements"
ANNOUNCE_DOMAIN = b"p2paudit/announce/v1\x00"
RUNS_TOPIC = "/p2paudit/runs/v1"
ANNOUNCEMENTS_PROTOCOL = "/p2paudit/announcements/1.0.0"
MAX_URLS = 4
MAX_URL_CHARS = 512
MAX_ANNOUNCE_BYTES = 96 + MAX_URLS * (MAX_URL_CHARS + 3) + 64 + 16
MAX_FOLLOWED = 64  # publisher keys in one announcements request
MAX_LISTED = 256  # announcements in one answer
MAX_LIST_REQUEST_BYTES = 32 + MAX_FOLLOWED * (HASH_SIZE + 2)
MAX_LIST_BYTES = 64 + MAX_LISTED * (MAX_ANNOUNCE_BYTES + 3)


@dataclass(frozen=True)
class Announcement:
    run_id: bytes
    urls: tuple[str, ...]
    publisher: bytes
    time_ms: int
    signature: bytes

    def signed_part(self) -> bytes:
        return pack([MAGIC_ANNOUNCE, VERSION, self.run_id, list(self.urls), self.publisher, self.time_ms])


def _check_url(url: object, n: int) -> str:
    text = check_text(url, f"announcement url {n}", MAX_URL_CHARS)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WireError(f"announcement url {n} {text[:80]!r} is not http(s)://host/...")
    return text


def sign_announcement(identity: Identity, run_id: bytes, urls: list[str], time_ms: int) -> bytes:
    """The announcement of run `run_id` at `urls`, signed with the publisher's key."""
    unsigned = Announcement(run_id, tuple(urls), identity.public_key, time_ms, b"")
    signature = sign(identity, ANNOUNCE_DOMAIN + unsigned.signed_part())
    data = encode_announcement(Announcement(run_id, tuple(urls), identity.public_key, time_ms, signature))
    decode_announcement(data)  # what we send is what every node will accept
    return data


def encode_announcement(a: Announcement) -> bytes:
    check_bin(a.run_id, "announced run id", HASH_SIZE, HASH_SIZE)
    check_list(list(a.urls), "announcement urls", 1, MAX_URLS)
    for n, url in enumerate(a.urls):
        _check_url(url, n)
    check_bin(a.publisher, "announcement publisher key", 32, 32)
    check_int(a.time_ms, "announcement time")
    check_bin(a.signature, "announcement signature", 64, 64)
    return pack([MAGIC_ANNOUNCE, VERSION, a.run_id, list(a.urls), a.publisher, a.time_ms, a.signature])


def decode_announcement(data: bytes) -> Announcement:
    """The announcement in `data`, its signature checked; WireError naming the first fault."""
    fields = unpack_message(data, MAX_ANNOUNCE_BYTES, MAGIC_ANNOUNCE, "announcement")
    check_fields(fields, 5, "announcement")
    run_id = check_bin(fields[0], "announced run id", HASH_SIZE, HASH_SIZE)
    urls = tuple(_check_url(u, n) for n, u in enumerate(check_list(fields[1], "announcement urls", 1, MAX_URLS)))
    publisher = check_bin(fields[2], "announcement publisher key", 32, 32)
    time_ms = check_int(fields[3], "announcement time")
    signature = check_bin(fields[4], "announcement signature", 64, 64)
    a = Announcement(run_id, urls, publisher, time_ms, signature)
    if not verify_signature(publisher, signature, ANNOUNCE_DOMAIN + a.signed_part()):
        raise WireError(f"announcement of run {run_id.hex()[:16]}.. is not signed by key {publisher.hex()[:16]}..")
    return a


def check_manifest(a: Announcement, manifest: SignedRun) -> None:
    """WireError unless `manifest` (fetched at one of the URLs, its own signature checked) is the announced
    run and was signed by the announcing key."""
    if manifest.run_id != a.run_id:
        raise WireError(
            f"the manifest at {a.urls[0][:80]} is run {manifest.run_id.hex()[:16]}.., not the announced one"
        )
    if manifest.public_key != a.publisher:
        raise WireError(f"the manifest at {a.urls[0][:80]} is signed by another key than the announcement's")


def encode_list_request(publishers: list[bytes]) -> bytes:
    check_list(publishers, "followed keys", 1, MAX_FOLLOWED)
    for key in publishers:
        check_bin(key, "followed key", 32, 32)
    return pack([MAGIC_ANNOUNCEMENTS, VERSION, "list_request", publishers])


def decode_list_request(data: bytes) -> list[bytes]:
    fields = unpack_message(data, MAX_LIST_REQUEST_BYTES, MAGIC_ANNOUNCEMENTS, "announcements request")
    check_fields(fields, 2, "announcements request")
    if fields[0] != "list_request":
        raise WireError(f"announcements request kind {str(fields[0])[:40]!r} is not list_request")
    return [check_bin(k, "followed key", 32, 32) for k in check_list(fields[1], "followed keys", 1, MAX_FOLLOWED)]


def encode_list(announcements: list[bytes]) -> bytes:
    check_list(announcements, "announcements", 0, MAX_LISTED)
    return pack([MAGIC_ANNOUNCEMENTS, VERSION, "list", announcements])


def list_refusal(reason: str) -> bytes:
    return pack([MAGIC_ANNOUNCEMENTS, VERSION, "refusal", clip_text(reason)])


def decode_list(data: bytes) -> list[bytes]:
    """The announcements' bytes (each still to be decoded and checked); PeerRefused for a refusal."""
    fields = unpack_message(data, MAX_LIST_BYTES, MAGIC_ANNOUNCEMENTS, "announcements answer")
    if fields and fields[0] == "refusal":
        check_fields(fields, 2, "announcements refusal")
        raise PeerRefused(f"peer refused the announcements request: {check_text(fields[1], 'reason', MAX_TEXT)}")
    check_fields(fields, 2, "announcements answer")
    if fields[0] != "list":
        raise WireError(f"announcements answer kind {str(fields[0])[:40]!r} is not list")
    items = check_list(fields[1], "announcements", 0, MAX_LISTED)
    return [check_bin(item, f"announcement {n}", 1, MAX_ANNOUNCE_BYTES) for n, item in enumerate(items)]


ANNOUNCEMENTS = ProtocolSpec(
    ANNOUNCEMENTS_PROTOCOL,
    MAX_LIST_REQUEST_BYTES,
    MAX_LIST_BYTES,
    10.0,
    list_refusal,
    encode_list_request,
    decode_list_request,
    encode_list,
    decode_list,
)


def asker(node: Node, peer: str) -> Callable[[bytes], Awaitable[bytes]]:
    """The asking end for `peer`: request bytes -> its list of announcements, under ANNOUNCEMENTS's limits."""

    async def ask(data: bytes) -> bytes:
        return await node.ask(peer, ANNOUNCEMENTS, data)

    return ask
