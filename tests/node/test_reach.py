"""Reachability on loopback, all in one trio process: dial-back, the guarded relay service, circuits, status.

The namespace tests (tests/netns/test_reach.py) put the same code behind real NATs; these run anywhere.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import msgpack
import pytest
import trio
import trio.testing
from libp2p.peer.id import ID
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.pb.circuit_pb2 import PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg
from test_libp2p_adapter import config, ident, run, wait_until

from p2paudit.errors import InputError
from p2paudit.node.net import ReachConfig, RelayServiceLimits, open_node
from p2paudit.node.net._config import BEHIND_NAT, PUBLIC, UNKNOWN
from p2paudit.node.net._dialback import (
    DIALBACK_PROTOCOL,
    FAILED,
    OK,
    REFUSED,
    Answer,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from p2paudit.node.net._dialback_client import Tally

QUIET = dict(dialback=False, hole_punch=False)  # nodes that only do what a test asks


def _relay_config(**limits) -> ReachConfig:
    return ReachConfig(relay_service=True, relay_limits=RelayServiceLimits(**limits), **QUIET)


def _client_config(**changes) -> ReachConfig:
    return ReachConfig(**{**QUIET, "reserve_after_unknown": 0.0, "max_relays": 1, **changes})


def test_dialback_messages_are_canonical_and_bounded():
    assert decode_request(encode_request("/ip4/0.0.0.0/tcp/4001")) == "/ip4/0.0.0.0/tcp/4001"
    answer = decode_response(encode_response(OK, "/ip4/203.0.113.9/tcp/4001", "done"))
    assert (answer.code, answer.addr) == (OK, "/ip4/203.0.113.9/tcp/4001")
    bad = [
        b"",
        encode_request("/ip4/1.2.3.4/tcp/4001") + b"\x00",  # trailing bytes
        msgpack.packb(["p2paudit/dialback", 2, "/ip4/1.2.3.4/tcp/1"]),  # version
        msgpack.packb(["p2paudit/dialback", 1, "/ip4/1.2.3.4/udp/1"]),  # not TCP
        msgpack.packb(["p2paudit/dialback", 1, "/ip4/1.2.3.4/tcp/0"]),  # port 0
        msgpack.packb(["p2paudit/dialback", 1, "/ip4/1.2.3.4/tcp/1/p2p-circuit"]),
        msgpack.packb(["p2paudit/dialback", 1, "x" * 300]),
    ]
    for data in bad:
        with pytest.raises(InputError):
            decode_request(data)
    for data in (msgpack.packb(["p2paudit/dialback", 1, 7, "", ""]), msgpack.packb(["p2paudit/dialback", 1, 0, 5, ""])):
        with pytest.raises(InputError):
            decode_response(data)


@pytest.mark.timeout(120)
def test_dialback_decides_public_on_loopback_and_refuses_other_ips_and_repeats():
    async def body():
        async with AsyncExitStack() as stack:
            nodes = []
            for i in range(3):
                boot = (nodes[0].listen_addrs()[0],) if nodes else ()
                reach = ReachConfig(hole_punch=False)
                nodes.append(
                    await stack.enter_async_context(open_node(ident(40 + i), config(bootstrap=boot, reach=reach)))
                )
            await wait_until(lambda: all(n.reachability().state == "public" for n in nodes), "dial-backs deciding")
            for node in nodes:
                status = node.reachability()
                assert sum(" ok " in line for line in status.dialbacks) >= 2, status.dialbacks
                assert node.listen_addrs()[0] in [f"{a}" for a in status.addresses]
                assert status.reservations == () and {link.kind for link in status.links} == {"direct"}
            asker = await stack.enter_async_context(
                open_node(ident(49), config(bootstrap=(nodes[0].listen_addrs()[0],), reach=ReachConfig(**QUIET)))
            )
            server = nodes[0].peer_id
            await wait_until(lambda: server in asker.connected_peers(), "connection")

            async def ask(addr: str):
                return decode_response(await asker.request(server, DIALBACK_PROTOCOL, encode_request(addr), timeout=15))

            other_ip = await ask("/ip4/203.0.113.5/tcp/4001")  # no amplification: only the requester's own IP
            assert other_ip.code == REFUSED and "not the address" in other_ip.reason
            closed = await ask("/ip4/0.0.0.0/tcp/1")  # our IP as the server sees it, a port nobody listens on
            assert (closed.code, closed.addr) == (FAILED, "/ip4/127.0.0.1/tcp/1"), closed
            again = await ask("/ip4/0.0.0.0/tcp/1")
            assert again.code == REFUSED and "per minute" in again.reason.replace("60 s", "minute")

    run(body, 40, mock_clock=True)


@pytest.mark.timeout(60)
def test_a_node_with_one_peer_to_ask_takes_its_answer_after_a_while():
    """Told only its bootstrap node (a home volunteer: every other peer is behind the relay, with no IP to dial
    back), a node gets one answer a round; it used to stay "unknown" for good."""

    async def body():
        async with AsyncExitStack() as stack:
            reach = ReachConfig(hole_punch=False, dialback_alone_after=1.0)
            boot = await stack.enter_async_context(open_node(ident(60), config(reach=reach)))
            home = await stack.enter_async_context(
                open_node(ident(61), config(bootstrap=(boot.listen_addrs()[0],), reach=reach))
            )
            await wait_until(lambda: home.reachability().state == "public", "the only answer deciding")
            (line,) = home.reachability().dialbacks
            assert " ok " in line and boot.peer_id[:16] in line

    run(body, 30, mock_clock=True)


def test_a_lone_answer_decides_only_after_its_wait_and_two_that_disagree_leave_it_unknown():
    async def body():  # on trio's clock, as the node keeps it: MockClock waits the 30 s out at once
        now = trio.current_time
        tally = Tally(now())
        tally.record("peer-a", Answer(FAILED, "/ip4/203.0.113.7/tcp/4001", "no answer"), now())
        await trio.sleep(29.999)
        tally.settle_alone(30.0, now())
        assert tally.state == UNKNOWN  # the round is younger than 30 s
        await trio.sleep(0.001)
        tally.settle_alone(30.0, now())
        assert (tally.state, tally.decided) == (BEHIND_NAT, False)  # provisional: asking goes on
        tally.record("peer-b", Answer(OK, "/ip4/203.0.113.7/tcp/4001", "dialled"), now())
        tally.settle_alone(30.0, now())
        assert tally.state == UNKNOWN
        tally.record("peer-c", Answer(OK, "/ip4/203.0.113.7/tcp/4001", "dialled"), now())
        assert (tally.state, tally.decided) == (PUBLIC, True)

    trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))


@pytest.mark.slow  # 4.2 s (fast tier: pytest -m 'not slow')
@pytest.mark.timeout(120)
def test_relay_service_reserves_for_the_connections_peer_only_within_its_limits_and_drops_on_disconnect():
    async def body():
        async with AsyncExitStack() as stack:
            relay = await stack.enter_async_context(
                open_node(ident(50), config(peer_exchange_interval=3600, reach=_relay_config(reservations_per_ip=2)))
            )
            boot = (relay.listen_addrs()[0],)
            relay_id = ID.from_base58(relay.peer_id)
            squatter = await stack.enter_async_context(
                open_node(
                    ident(51),
                    config(bootstrap=boot, peer_exchange_interval=3600, reach=ReachConfig(**QUIET, max_relays=0)),
                )
            )
            await wait_until(lambda: relay.peer_id in squatter.connected_peers(), "connection")

            async def raw_reserve(for_peer: ID | None) -> int:
                stream = await squatter.host.new_stream(relay_id, [HOP])
                message = HopMessage(type=HopMessage.RESERVE)
                if for_peer is not None:
                    message.peer.CopyFrom(CircuitPeerId(id=for_peer.to_bytes()))
                await write_delimited_msg(stream, message)
                with trio.fail_after(10):
                    answer = await read_delimited_msg(stream, HopMessage)
                await stream.close()
                return int(answer.status)

            made_up = ID.from_base58(peer_id_of_seed(52))
            assert await raw_reserve(made_up) == 202  # PERMISSION_DENIED, and no slot taken
            assert relay.reach.circuit.reserved_peers() == []
            assert await raw_reserve(None) == 100
            assert await raw_reserve(ID.from_base58(squatter.peer_id)) == 100  # naming itself is fine
            assert relay.reach.circuit.reserved_peers() == [ID.from_base58(squatter.peer_id)]
            clients = []
            for i in (53, 54):
                node = open_node(ident(i), config(bootstrap=boot, peer_exchange_interval=3600, reach=_client_config()))
                clients.append(await stack.enter_async_context(node))
            # Either client may ask first (under load the second often does): the one that gets the IP's last
            # slot is the holder, the other keeps trying: 2 per IP (loopback is one IP) are taken, so the
            # relay refuses it.
            await wait_until(
                lambda: any(c.reachability().reservations == (relay.peer_id,) for c in clients), "a reservation"
            )
            holder = next(c for c in clients if c.reachability().reservations == (relay.peer_id,))
            other = clients[1] if holder is clients[0] else clients[0]
            await wait_until(lambda: relay.reachability().relay_service.refused >= 1, "the relay to refuse", 10)
            assert other.reachability().reservations == ()
            assert relay.reachability().relay_service.refused >= 1
            guard, x, y = relay.reach.circuit, ID.from_base58(holder.peer_id), ID.from_base58(other.peer_id)
            assert "itself" in guard._circuit_refusal(x, x) and guard._circuit_refusal(x, y) is None
            guard._per_peer[y] = 4  # circuits are counted at both ends
            assert "limit per peer" in guard._circuit_refusal(x, y)
            guard._per_peer.clear()
            guard.circuits = 16
            assert "its limit" in guard._circuit_refusal(x, y)
            guard.circuits = 0
            assert any("/p2p-circuit" in a for a in holder.reachability().addresses)
            await squatter.penalize(relay.peer_id, "leaving", seconds=60)  # its last connection to the relay closes
            await wait_until(lambda: len(relay.reach.circuit.reserved_peers()) == 1, "the squatter's slot freed")

    run(body, 40)


def peer_id_of_seed(i: int) -> str:
    from p2paudit.identity import peer_id_of

    return peer_id_of(ident(i).public_key)


@pytest.mark.slow  # 6.6 s and 2.7 s (fast tier: pytest -m 'not slow')
@pytest.mark.timeout(150)
@pytest.mark.parametrize("hole_punch", [False, True])
def test_a_peer_is_reached_through_its_relay_and_dcutr_upgrades_the_link(hole_punch):
    async def body():
        async with AsyncExitStack() as stack:
            seconds = 600 if hole_punch else 4  # a circuit's time: an idle one is reset then
            relay = await stack.enter_async_context(
                open_node(ident(60), config(peer_exchange_interval=3600, reach=_relay_config(circuit_seconds=seconds)))
            )
            boot = (relay.listen_addrs()[0],)
            reach = _client_config(hole_punch=hole_punch)
            cfg = config(bootstrap=boot, peer_exchange_interval=3600, reach=reach)
            a = await stack.enter_async_context(open_node(ident(61), cfg))
            b = await stack.enter_async_context(open_node(ident(62), cfg))
            await wait_until(lambda: a.reachability().reservations == (relay.peer_id,), "a reservation")

            async def echo(peer, request):
                return request[::-1]

            for node in (a, b):
                node.set_handler("/t/echo/1", echo, max_request=64, max_response=64, timeout=5, refuse=str.encode)
            circuit = next(x for x in a.reachability().addresses if "/p2p-circuit" in x)
            assert await b.connect(circuit) == a.peer_id
            assert {link.peer: link.kind for link in b.reachability().links}[a.peer_id] in ("relayed", "hole-punched")
            if not hole_punch:
                link = {link.peer: link for link in b.reachability().links}[a.peer_id]
                assert (link.kind, link.relay) == ("relayed", relay.peer_id)
                await wait_until(lambda: a.peer_id in b.connected_peers() and b.peer_id in a.connected_peers(), "both")
                back = {link.peer: link for link in a.reachability().links}[b.peer_id]
                assert (back.kind, back.relay) == ("relayed", relay.peer_id)  # inbound: the relay noted at stop
                assert relay.reachability().relay_service.circuits == 1
            before = relay.reachability().relay_service.relayed_bytes
            assert await b.request(a.peer_id, "/t/echo/1", b"abc") == b"cba"
            assert await a.request(b.peer_id, "/t/echo/1", b"xyz") == b"zyx"
            if not hole_punch:  # two requests and answers through the circuit: Noise frames, yamux, multistream
                assert relay.reachability().relay_service.relayed_bytes >= before + 4 * (3 + 16)
            if hole_punch:
                await wait_until(
                    lambda: {link.peer: link.kind for link in b.reachability().links}.get(a.peer_id) == "hole-punched",
                    "DCUtR's direct connection",
                    timeout=20,
                )
                assert await b.request(a.peer_id, "/t/echo/1", b"abc") == b"cba"
            else:  # past its time the relay resets the circuit, idle or not, and no dead link stays listed
                await wait_until(lambda: a.peer_id not in b.connected_peers(), "the circuit reset", timeout=15)
                await wait_until(lambda: b.peer_id not in a.connected_peers(), "the circuit reset", timeout=5)
                assert relay.reachability().relay_service.circuits == 0

    run(body, 45, mock_clock=True)


async def _relay_until(cfg, scope: trio.CancelScope, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """A relay node in its own task, stopped by cancelling `scope` (a node entered earlier than another in one
    exit stack cannot close first: trio's nurseries nest)."""
    with scope:
        async with open_node(ident(80), cfg) as relay:
            task_status.started(relay)
            await trio.sleep_forever()


@pytest.mark.timeout(120)
def test_a_client_reserves_again_when_its_relay_comes_back():
    async def body():
        async with trio.open_nursery() as nursery:
            first = trio.CancelScope()
            relay = await nursery.start(_relay_until, config(reach=_relay_config()), first)
            addr = relay.listen_addrs()[0]
            port = addr.split("/tcp/")[1].split("/")[0]
            cfg = config(bootstrap=(addr,), peer_exchange_interval=3600, reach=_client_config())
            async with open_node(ident(81), cfg) as client:
                await wait_until(lambda: client.reachability().reservations == (relay.peer_id,), "a reservation")
                first.cancel()  # the relay goes away: its reservation is void
                await wait_until(lambda: client.reachability().reservations == (), "the reservation dropped", 10)
                assert not any("/p2p-circuit" in a for a in client.reachability().addresses)
                again = config(listen=(f"/ip4/127.0.0.1/tcp/{port}",), reach=_relay_config())
                second = trio.CancelScope()
                relay = await nursery.start(_relay_until, again, second)
                await wait_until(lambda: client.reachability().reservations == (relay.peer_id,), "a new reservation")
                await wait_until(lambda: any("/p2p-circuit" in a for a in client.reachability().addresses), "told")
                second.cancel()

    run(body, 30, mock_clock=True)


def test_status_shows_reachability_relays_and_how_each_peer_is_reached(tmp_path):
    from click.testing import CliRunner

    from p2paudit.cli import cli
    from p2paudit.node.daemon.status import Status, write_status
    from p2paudit.node.net import PeerLink, Reachability
    from p2paudit.node.net._config import RelayServiceState

    relay, a, b = (peer_id_of_seed(i) for i in (70, 71, 72))
    reach = Reachability(
        state="behind-nat",
        addresses=(f"/ip4/203.0.113.10/tcp/4001/p2p/{relay}/p2p-circuit/p2p/{a}",),
        relays=(relay,),
        reservations=(relay,),
        links=(PeerLink(relay, "direct"), PeerLink(b, "relayed", relay)),
        dialbacks=(f"{relay[:16]}..: failed /ip4/203.0.113.101/tcp/4001 (not reached)",),
        relay_service=RelayServiceState(0, 0, 0, 123_456),
    )
    status = Status(1, 0.0, a, "00", [], [relay, b], {"path": "l", "size": 0}, 0, 0, None, [], 0, [], {}, [])
    write_status(tmp_path / "status.json", Status(**{**status.__dict__, "reach": reach.to_dict()}))
    shown = CliRunner().invoke(cli, ["status"], env={"P2PAUDIT_HOME": str(tmp_path)})
    assert shown.exit_code == 0, shown.output
    assert "reachability: behind-nat; 1 relay(s) in use (1 reservation(s) held)" in shown.output
    assert f"peer {b}: relayed via {relay}" in shown.output and f"peer {relay}: direct" in shown.output
    assert "/p2p-circuit/p2p/" in shown.output and "dial-back" in shown.output
    assert "relay service: 0 reservation(s), 0 circuit(s), 0 request(s) refused, 123,456 bytes relayed" in shown.output


def test_a_bad_announce_address_is_refused_in_one_line(tmp_path):
    from click.testing import CliRunner

    from p2paudit.cli import cli

    argv = ["daemon", "--follow", "00" * 32, "--announce", "not-an-address", "--duration", "1"]
    result = CliRunner().invoke(cli, argv, env={"P2PAUDIT_HOME": str(tmp_path)})
    assert result.exit_code == 2, result.output
    assert "not-an-address" in result.output and "node key" not in result.output
