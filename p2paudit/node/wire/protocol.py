"""One object per request protocol: its id, its two messages' codecs and limits, its time limit.

Both ends take the same object, so their limits cannot drift apart: the serving node
(`p2paudit.node.net.Node.serve`) refuses a request over `max_request`, answers within `timeout`
and never sends more than `max_answer`; the asking node (`Node.ask`) reads at most `max_answer`
and waits `wait`: the serving end's time plus `slack` where the network adds its own (dial-back,
whose server spends its whole time dialling). The table of protocols a daemon serves is built
from these objects (node.daemon.run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from p2paudit.errors import InternalError


@dataclass(frozen=True)
class ProtocolSpec:
    """A request/answer protocol. `encode_request`/`decode_request` are None where the request is empty
    (max_request 0); `decode_answer` raises WireError for a malformed answer and PeerRefused for a refusal
    (protocols whose answer comes in kinds take the kind asked for as a second argument)."""

    id: str
    max_request: int
    max_answer: int
    timeout: float
    refusal: Callable[[str], bytes]
    encode_request: Callable[..., bytes] | None
    decode_request: Callable[[bytes], Any] | None
    encode_answer: Callable[..., bytes]
    decode_answer: Callable[..., Any]
    slack: float = 0.0
    max_concurrent_per_peer: int | None = None  # None: the node's own per-peer limit

    def __post_init__(self) -> None:
        if not self.id.startswith("/") or self.max_request < 0 or self.max_answer < 1 or self.timeout <= 0:
            raise InternalError(f"protocol {self.id!r}: limits {self.max_request}/{self.max_answer}/{self.timeout}")
        if (self.max_request == 0) != (self.decode_request is None) or self.slack < 0:
            raise InternalError(f"protocol {self.id!r}: an empty request has no codec, and only an empty one")

    @property
    def wait(self) -> float:
        """How long the asking end waits for the answer."""
        return self.timeout + self.slack

    def answer_limit(self, narrower: int | None) -> int:
        """The answer limit of one call: the protocol's, or a narrower one for an answer kind known to be
        smaller (a sync status is a few KiB of the page's limit). InternalError for a wider one (our bug)."""
        if narrower is None:
            return self.max_answer
        if not 0 < narrower <= self.max_answer:
            raise InternalError(f"{self.id}: answer limit {narrower} is not within the protocol's {self.max_answer}")
        return narrower
