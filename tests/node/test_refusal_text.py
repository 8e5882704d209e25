"""A refusal's reason, clipped to the wire's byte limit, still decodes as a refusal: never as a bad answer.

A reason repeats request fields a peer chose; clipped by characters, 200 of them
in a non-ASCII script pass the decoders' 200-byte limit, and the requester took
the honest refusal for a malformed answer (a fault that bans).
"""

from __future__ import annotations

import pytest

from p2paudit.node.net._peers import decode_peer_list, encode_peer_refusal
from p2paudit.node.protocols import announce, reconcile
from p2paudit.node.wire import MAX_TEXT, PeerRefused, clip_text
from p2paudit.node.wire.sync import SyncRefusal, decode_sync_response, sync_refusal

REASONS = ["é" * 300, "€" * 150, "🙂" * 80, "a" * 199 + "é", "plain ascii, short"]
DECODERS = {
    "reconcile": (reconcile.refusal, lambda data: reconcile.decode_answer(data, "summary")),
    "announcements": (announce.list_refusal, announce.decode_list),
    "peer exchange": (encode_peer_refusal, lambda data: decode_peer_list(data, 10, 10)),
}


@pytest.mark.parametrize("reason", REASONS)
@pytest.mark.parametrize("protocol", list(DECODERS))
def test_a_clipped_reason_is_still_a_refusal(protocol, reason):
    encode, decode = DECODERS[protocol]
    with pytest.raises(PeerRefused) as refused:
        decode(encode(reason))
    assert clip_text(reason) in str(refused.value)


@pytest.mark.parametrize("reason", REASONS)
def test_sync_refusal_keeps_the_clipped_reason(reason):
    answer = decode_sync_response(sync_refusal(reason))
    assert answer == SyncRefusal(clip_text(reason))


def test_clip_text_cuts_bytes_and_never_a_character():
    for reason in REASONS:
        clipped = clip_text(reason)
        assert len(clipped.encode("utf-8")) <= MAX_TEXT and reason.startswith(clipped)
        assert len(clipped) == len(reason) or len(clip_text(reason[: len(clipped) + 1]).encode()) <= MAX_TEXT
    assert clip_text("€" * 100) == "€" * 66  # 3 bytes each: 198 bytes, the 67th would make 201
