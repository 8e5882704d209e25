"""The settled protocol, both ends: "are you covered by your own rule?" (--until-covered coordination).

The request is empty; the answer is 0x01 (covered), 0x00 (not yet) or 0x02 and a reason (a refusal);
its limits are wire.SETTLED's. A node that stops only when every peer answers 0x01 cannot leave before
a peer that still audits or sends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from p2paudit.errors import InputError, NetworkError
from p2paudit.node.wire import SETTLED, decode_settled, encode_settled

if TYPE_CHECKING:
    from p2paudit.node.net import Node

__all__ = ["SETTLED", "all_settled", "answer"]


def answer(covered: bool) -> bytes:
    """The serving end's answer."""
    return encode_settled(covered)


async def all_settled(node: Node, peers: list[str]) -> bool:
    """True when each of `peers` answers that it is covered; False at the first that does not, cannot be
    reached or answers badly (asked in order, one at a time)."""
    for peer in peers:
        try:
            if not decode_settled(await node.ask(peer, SETTLED, b"")):
                return False
        except (NetworkError, InputError):
            return False
    return True
