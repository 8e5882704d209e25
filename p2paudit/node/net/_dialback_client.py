"""Dial-back, the asking end (adapter-internal): `DialbackClient` asks peers to dial us back, `Tally`
keeps one round of their answers (the messages and the serving end are in _dialback; its docstring
tells the protocol and why a lone answer decides, provisionally).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio
from libp2p.abc import IHost
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.dcutr import _external_ips

from p2paudit.errors import InputError, NetworkError
from p2paudit.node.net._config import BEHIND_NAT, PUBLIC, UNKNOWN, ReachConfig
from p2paudit.node.net._dialback import (
    ASK_AGAIN_AFTER,
    FAILED,
    MAX_REMEMBERED,
    OK,
    REFUSED,
    TICK,
    WILDCARD,
    Answer,
    RequestFn,
    decode_response,
    dialback_spec,
    encode_request,
)
from p2paudit.node.timing.bounded_map import BoundedMap

logger = logging.getLogger(__name__)


def slash24(ip: str) -> str:
    return ip.rsplit(".", 1)[0]


class Tally:
    """One round of dial-back answers, one per peer; 2 agreeing answers decide. Times (`now`) are the
    caller's clock (trio's, in the node)."""

    def __init__(self, now: float) -> None:
        self.state = UNKNOWN
        self.round_started = now
        self.answers: dict[str, Answer] = {}
        self.asked: set[str] = set()  # this round (a peer is asked once per round)
        self.confirmed: str | None = None  # the address an OK answer dialled
        self.decided_at: float | None = None

    def new_round(self, now: float) -> None:
        self.round_started = now
        self.answers = {}
        self.asked = set()
        self.decided_at = None

    def record(self, peer: str, answer: Answer, now: float) -> None:
        self.answers[peer] = answer
        oks = [a for a in self.answers.values() if a.code == OK]
        failed = [a for a in self.answers.values() if a.code == FAILED]
        if len(oks) >= 2:
            self.state, self.confirmed, self.decided_at = PUBLIC, oks[-1].addr, now
        elif len(failed) >= 2:
            self.state, self.confirmed, self.decided_at = BEHIND_NAT, None, now

    def settle_alone(self, after: float, now: float) -> None:
        """Take the only answer of a round `after` seconds old as the state, provisionally (not `decided`: the
        client keeps asking, and 2 agreeing answers overrule it); 2 answers that disagree leave it unknown."""
        answered = [a for a in self.answers.values() if a.code != REFUSED]
        if self.decided or now - self.round_started < after:
            return
        if len(answered) == 1:
            self.state = PUBLIC if answered[0].code == OK else BEHIND_NAT
            self.confirmed = answered[0].addr if answered[0].code == OK else None
        elif len(answered) > 1:
            self.state, self.confirmed = UNKNOWN, None

    @property
    def decided(self) -> bool:
        return self.decided_at is not None

    @property
    def any_failed(self) -> bool:
        return any(a.code == FAILED for a in self.answers.values())

    @property
    def leaning_nat(self) -> bool:
        """Behind NAT, or undecided with failures and no success: our bound addresses reach nobody."""
        if self.state == BEHIND_NAT:
            return True
        codes = [a.code for a in self.answers.values()]
        return self.state == UNKNOWN and FAILED in codes and OK not in codes

    def lines(self) -> tuple[str, ...]:
        names = {OK: "ok", FAILED: "failed", REFUSED: "refused"}
        return tuple(f"{p[:16]}..: {names[a.code]} {a.addr} ({a.reason[:80]})" for p, a in self.answers.items())


class DialbackClient:
    """Asks peers we reach directly to dial us back, up to `dialback_peers` at a time, from different /24s
    first, each once per round, and keeps the `Tally`; a new round every `recheck_interval` and when
    identify shows a new observed IP."""

    def __init__(
        self,
        host: IHost,
        config: ReachConfig,
        announce: tuple[str, ...],
        tally: Tally,
        request: RequestFn,
        remote_ips: Callable[[ID], list[str]],
        emit: Callable[[str, str, str], None],
    ) -> None:
        self.host = host
        self._config = config
        self._announce = announce
        self.tally = tally
        self._request = request
        self.remote_ips = remote_ips
        self._emit = emit
        # peer -> when we last asked it; over ASK_AGAIN_AFTER later, and bounded (the oldest go).
        self._asked_at: BoundedMap[str, None] = BoundedMap(MAX_REMEMBERED, max_age=ASK_AGAIN_AFTER)
        self._no_dialback: set[str] = set()
        self._observed_ips: frozenset[str] = frozenset()

    def _probe_addr(self) -> str | None:
        """The address to have checked: the first announced one, else "my IP as you see it" with our port."""
        for addr in self._announce:
            if addr.startswith("/ip4/") and "/tcp/" in addr and "/p2p-circuit" not in addr:
                return "/".join(addr.split("/")[:5])
        for addr in self.host.get_transport_addrs():
            try:
                return f"/ip4/{WILDCARD}/tcp/{int(addr.value_for_protocol('tcp'))}"
            except Exception:  # noqa: BLE001 (not TCP)
                continue
        return None

    def _maybe_new_round(self) -> None:
        manager = getattr(self.host, "_observed_addr_manager", None)
        ips: frozenset[str] = frozenset()
        if manager is not None:
            ips = frozenset(ip for _, ip in _external_ips(manager.addrs(min_observers=1)))
        changed = bool(self._observed_ips) and bool(ips) and ips != self._observed_ips
        self._observed_ips = ips or self._observed_ips
        now = trio.current_time()
        decided_at = self.tally.decided_at  # tally.decided: not None
        stale = decided_at is not None and now - decided_at > self._config.recheck_interval
        if changed or stale:
            logger.info("dial-back: asking again (%s)", "observed address changed" if changed else "recheck")
            self.tally.new_round(now)

    def _dialback_candidates(self) -> list[str]:
        now = trio.current_time()
        used = {slash24(ips[0]) for p in self.tally.answers if (ips := self.remote_ips(ID.from_base58(p)))}
        fresh: list[str] = []
        again: list[str] = []
        for peer_id in sorted(self.host.get_network().connections, key=str):
            peer, ips = str(peer_id), self.remote_ips(peer_id)
            if not ips or peer in self.tally.asked or peer in self._no_dialback:
                continue
            if self._asked_at.alive(peer, now):
                continue
            (again if slash24(ips[0]) in used else fresh).append(peer)
            used.add(slash24(ips[0]))
        return (fresh + again)[: self._config.dialback_peers]

    async def run(self) -> None:
        while True:
            await trio.sleep(TICK)
            if not self._config.dialback:
                await trio.sleep_forever()
            self._maybe_new_round()
            addr = self._probe_addr()
            if self.tally.decided or addr is None:
                continue
            before = self.tally.state
            self.tally.settle_alone(self._config.dialback_alone_after, trio.current_time())
            if self.tally.state != before:
                self._emit("reachability", "-", self.tally.state)
            async with trio.open_nursery() as nursery:
                for peer in self._dialback_candidates():
                    nursery.start_soon(self._ask, peer, addr)

    async def _ask(self, peer: str, addr: str) -> None:
        self.tally.asked.add(peer)
        self._asked_at.put(peer, None, trio.current_time())
        try:
            data = encode_request(addr)
            spec = dialback_spec(self._config.dialback_timeout)
            answer = decode_response(await self._request(peer, spec.id, data, spec.max_answer, spec.wait))
        except NetworkError as error:  # it does not serve dial-back, or could not answer now: ask again later
            logger.info("dial-back by %s: %s", peer, error)
            self.tally.asked.discard(peer)
            return
        except InputError as error:  # a malformed answer: not asked again
            logger.warning("dial-back by %s: bad answer: %s", peer, error)
            self._no_dialback.add(peer)
            return
        before = self.tally.state
        self.tally.record(peer, answer, trio.current_time())
        if answer.code == REFUSED:  # busy, too soon, or our address is wrong for it: ask again later
            self.tally.asked.discard(peer)
        logger.info("dial-back by %s: code %d %s (%s)", peer, answer.code, answer.addr, answer.reason)
        if self.tally.state != before:
            self._emit("reachability", "-", self.tally.state)
