"""One plain py-libp2p 0.8.1 node for the reachability experiments, run inside a fabric namespace.

Built the way p2paudit/node/net/_host.py builds its hosts (Ed25519 identity from a 32-byte seed,
Noise only, yamux), with circuit relay v2, DCUtR and AutoNAT switched on per role:

    relay     a public node: relay service (hop), AutoNAT server, echo
    listen    a node behind NAT: reserves a slot on the relay, echoes, opens a stream back to
              whoever reaches it through the relay, optionally DCUtR and an AutoNAT query
    dial      a node behind NAT: dials the listener through /p2p-circuit, measures round trips and
              throughput, optionally waits for DCUtR to upgrade the connection
    autonat   any node: asks the relay's AutoNAT server whether it is reachable
    reserve   a node that asks for reservations (its own, and one for another peer id)

Output: one line per event, `EVENT <name> <json>`, for the orchestrating script; library logs
(warnings, and the relay/DCUtR modules at INFO) go to the same stream. Every role ends by itself
after --duration seconds at most.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import statistics
import sys
import time

import multiaddr
import trio
from libp2p import new_host
from libp2p.abc import IHost, INetStream
from libp2p.crypto.x25519 import create_new_key_pair as create_x25519_key_pair
from libp2p.custom_types import TProtocol
from libp2p.host.autonat import AutoNATService
from libp2p.identity_utils import create_identity_from_seed
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo, info_from_p2p_addr
from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol
from libp2p.relay.circuit_v2.pb.circuit_pb2 import HopMessage
from libp2p.relay.circuit_v2.pb.circuit_pb2 import PeerId as CircuitPeerId
from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP_PROTOCOL_ID
from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
from libp2p.relay.circuit_v2.resources import RelayLimits
from libp2p.relay.circuit_v2.transport import CircuitV2Transport
from libp2p.relay.circuit_v2.utils import read_delimited_msg, write_delimited_msg
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from libp2p.tools.anyio_service import background_trio_service

ECHO = TProtocol("/p2pa-netns/echo/1.0.0")
# A dial-back that really dials: a new connection to the claimed address, not py-libp2p's AutoNAT v1
# server (whose host.connect() returns the connection the request came on without dialling).
DIALBACK = TProtocol("/p2pa-netns/dialback/1.0.0")
CHUNK = 16 * 1024


def seed_bytes(seed: int) -> bytes:
    return hashlib.sha256(f"p2paudit/netns-experiment/{seed}".encode()).digest()


def peer_id_for(seed: int) -> str:
    return str(ID.from_pubkey(create_identity_from_seed(seed_bytes(seed)).public_key))


def describe(error: BaseException) -> str:
    """One line for an error; the first leaf of an exception group (trio nurseries wrap them)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"[:300]


def emit(name: str, **fields: object) -> None:
    print(f"EVENT {name} {json.dumps(fields, sort_keys=True, default=str)}", flush=True)


def build_host(seed: int, ip: str, port: int, max_conns_per_peer: int) -> tuple[IHost, multiaddr.Multiaddr]:
    key_pair = create_identity_from_seed(seed_bytes(seed))
    listen = multiaddr.Multiaddr(f"/ip4/{ip}/tcp/{port}")
    host = new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: NoiseTransport(key_pair, noise_privkey=create_x25519_key_pair().private_key)},
        muxer_opt={YAMUX_PROTOCOL_ID: Yamux},
        listen_addrs=[listen],
        connection_config=ConnectionConfig(max_connections_per_peer=max_conns_per_peer, dial_timeout=10.0),
    )
    return host, listen


def conn_kinds(host: IHost, peer: ID) -> list[str]:
    """How we are connected to `peer`: one "relayed" or "direct" per live connection."""
    kinds = []
    for conn in host.get_network().connections.get(peer, []):
        addrs = [str(a) for a in conn.get_transport_addresses()]
        kinds.append("relayed" if any("/p2p-circuit" in a for a in addrs) else "direct")
    return kinds


def stream_kind(host: IHost, stream: INetStream) -> str:
    peer = stream.muxed_conn.peer_id
    for conn in host.get_network().connections.get(peer, []):
        if conn.muxed_conn is stream.muxed_conn:
            addrs = [str(a) for a in conn.get_transport_addresses()]
            return "relayed" if any("/p2p-circuit" in a for a in addrs) else "direct"
    return "unknown"


async def echo_handler(stream: INetStream) -> None:
    try:
        while True:
            data = await stream.read(65536)
            if not data:
                break
            await stream.write(data)
    except Exception as error:  # a reset by the other side ends the echo; report, never crash
        emit("echo_handler_error", error=f"{type(error).__name__}: {error}"[:200])
    finally:
        try:
            await stream.close()
        except Exception:
            pass


async def read_exactly(stream: INetStream, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        data = await stream.read(n - len(got))
        if not data:
            raise EOFError(f"stream ended after {len(got)} of {n} bytes")
        got += data
    return bytes(got)


async def measure_echo(host: IHost, peer: ID, rounds: int, bulk: int, label: str, timeout: float = 20.0) -> dict:
    """Round trips of 32 bytes on one stream, then `bulk` bytes echoed back on another (written and
    read concurrently). Everything echoed is compared byte for byte."""
    result: dict = {"label": label, "rounds": rounds, "bulk_bytes": bulk}
    started = time.monotonic()
    try:
        with trio.fail_after(timeout):
            t0 = time.monotonic()
            stream = await host.new_stream(peer, [ECHO])
            result["open_stream_ms"] = round((time.monotonic() - t0) * 1000, 2)
            result["stream_kind"] = stream_kind(host, stream)
            rtts, echoed = [], 0
            for i in range(rounds):
                msg = i.to_bytes(4, "big") * 8
                t = time.monotonic()
                await stream.write(msg)
                back = await read_exactly(stream, len(msg))
                rtts.append((time.monotonic() - t) * 1000)
                echoed += len(back) if back == msg else 0
            await stream.close()
            result["echoed_small_bytes"] = echoed
            if rtts:
                result["rtt_ms_median"] = round(statistics.median(rtts), 2)
                result["rtt_ms_p90"] = round(sorted(rtts)[int(0.9 * (len(rtts) - 1))], 2)
                result["rtt_ms_max"] = round(max(rtts), 2)
            if bulk:
                payload = hashlib.shake_256(label.encode()).digest(bulk)
                stream = await host.new_stream(peer, [ECHO])
                back = bytearray()
                t = time.monotonic()

                async def writer() -> None:
                    for off in range(0, bulk, CHUNK):
                        await stream.write(payload[off : off + CHUNK])

                async def reader() -> None:
                    back.extend(await read_exactly(stream, bulk))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(writer)
                    nursery.start_soon(reader)
                seconds = time.monotonic() - t
                await stream.close()
                result["echoed_bulk_bytes"] = len(back) if bytes(back) == payload else 0
                result["bulk_seconds"] = round(seconds, 3)
                result["bulk_mib_per_s"] = round(bulk / seconds / 2**20, 3)
    except BaseException as error:
        if isinstance(error, trio.Cancelled):
            raise
        result["error"] = describe(error)
        result["failed_after_ms"] = round((time.monotonic() - started) * 1000, 1)
    return result


def dialback_handler(host: IHost):
    async def handle(stream: INetStream) -> None:
        peer = stream.muxed_conn.peer_id
        try:
            with trio.fail_after(10):
                claimed = multiaddr.Multiaddr((await stream.read(1024)).decode().strip())
                observed = stream.get_remote_address()
                # Dial only the IP the request came from (AutoNAT's rule against amplification).
                if observed is None or claimed.value_for_protocol("ip4") != observed[0]:
                    verdict = f"REFUSED not the observed ip {observed}"
                else:
                    try:
                        with trio.fail_after(5):
                            conn = await host.get_network().dial_addr(claimed, peer)
                        await conn.close()
                        verdict = "OK"
                    except Exception as error:
                        verdict = f"FAIL {type(error).__name__}"
                await stream.write(verdict.encode())
        except Exception as error:
            emit("dialback_handler_error", error=f"{type(error).__name__}: {error}"[:200])
        finally:
            await stream.close()

    return handle


async def ask_dialback(host: IHost, server: ID) -> None:
    addrs = [("listen_addrs", a) for a in host.get_transport_addrs()]
    addrs += [("observed_addrs", a) for a in observed_addrs(host)]
    for label, addr in addrs:
        try:
            with trio.fail_after(12):
                stream = await host.new_stream(server, [DIALBACK])
                await stream.write(str(addr).encode())
                verdict = (await stream.read(1024)).decode()
                await stream.close()
        except Exception as error:
            verdict = f"ERROR {type(error).__name__}"
        emit("dialback", label=label, addr=str(addr), verdict=verdict, ok=verdict == "OK")


def relay_limits(args: argparse.Namespace) -> RelayLimits:
    return RelayLimits(
        duration=args.circuit_seconds,
        data=args.circuit_bytes,
        max_circuit_conns=args.max_circuits,
        max_reservations=args.max_reservations,
        reservation_ttl=args.reservation_ttl,
    )


async def role_relay(args: argparse.Namespace) -> None:
    host, listen = build_host(args.seed, args.ip, args.port, args.max_conns)
    protocol = CircuitV2Protocol(host, limits=relay_limits(args), allow_hop=True)
    async with host.run(listen_addrs=[listen]), background_trio_service(protocol):
        AutoNATService(host, serve=True)
        host.set_stream_handler(ECHO, echo_handler)
        host.set_stream_handler(DIALBACK, dialback_handler(host))
        emit("ready", peer=str(host.get_id()), addrs=[str(a) for a in host.get_addrs()])
        with trio.move_on_after(args.duration):
            while True:
                await trio.sleep(1.0)
                reservations = protocol.resource_manager._reservations
                emit(
                    "relay_state",
                    reservations=sorted(str(p) for p in reservations),
                    active_circuits=len(protocol._active_relays),
                )


async def connect_relay(host: IHost, relay: str) -> tuple[ID, multiaddr.Multiaddr]:
    relay_addr = multiaddr.Multiaddr(relay)
    info = info_from_p2p_addr(relay_addr)
    t = time.monotonic()
    await host.connect(info)
    emit("relay_connected", ms=round((time.monotonic() - t) * 1000, 2), kinds=conn_kinds(host, info.peer_id))
    return info.peer_id, relay_addr


async def query_autonat(host: IHost, autonat: AutoNATService, relay_id: ID) -> None:
    """Ask the relay's AutoNAT server twice: with our listen addresses, then with the address the relay
    observed us at (what a node would advertise once identify told it its public address)."""
    await trio.sleep(1.0)  # identify's observed address arrives shortly after the connection
    for label, addrs in (
        ("listen_addrs", None),
        ("observed_addrs", [a.to_bytes() for a in observed_addrs(host)]),
    ):
        if addrs is not None and not addrs:
            emit("autonat", label=label, skipped="no observed address")
            continue
        try:
            status, addr = await autonat.query_server(relay_id, addrs=addrs, timeout=10)
            shown = str(multiaddr.Multiaddr(addr)) if addr else None
            emit("autonat", label=label, status=int(status), ok=status == 0, dialed=shown, sent=_shown(addrs, host))
        except Exception as error:
            emit("autonat", label=label, error=f"{type(error).__name__}: {error}"[:200])
    autonat.update_status()
    emit("autonat_status", status=autonat.get_status(), results={str(k): v for k, v in autonat.dial_results.items()})


def _shown(addrs: list[bytes] | None, host: IHost) -> list[str]:
    if addrs is None:
        return [str(a) for a in host.get_addrs()]
    return [str(multiaddr.Multiaddr(a)) for a in addrs]


def observed_addrs(host: IHost) -> list[multiaddr.Multiaddr]:
    manager = getattr(host, "_observed_addr_manager", None)
    if manager is None:
        return []
    return [a for a in manager.addrs(min_observers=1) if "/p2p-circuit" not in str(a)]


async def watch_connections(host: IHost, peer: ID, seconds: float, label: str) -> dict:
    """Poll how we are connected to `peer` every 0.25 s; report when a direct connection first appears."""
    t = time.monotonic()
    first_direct = None
    history: list[list[str]] = []
    while time.monotonic() - t < seconds:
        kinds = sorted(conn_kinds(host, peer))
        if not history or history[-1] != kinds:
            history.append(kinds)
            emit("conns", label=label, peer=str(peer), kinds=kinds, at_s=round(time.monotonic() - t, 2))
        if first_direct is None and "direct" in kinds:
            first_direct = round(time.monotonic() - t, 2)
        await trio.sleep(0.25)
    return {"first_direct_s": first_direct, "history": history}


async def role_listen(args: argparse.Namespace) -> None:
    host, listen = build_host(args.seed, args.ip, args.port, args.max_conns)
    protocol = CircuitV2Protocol(host, allow_hop=False)
    config = RelayConfig(roles=RelayRole.STOP | RelayRole.CLIENT)
    seen: trio.MemorySendChannel
    seen, arrivals = trio.open_memory_channel(16)

    async def note_inbound(stream: INetStream) -> None:
        await seen.send(stream.muxed_conn.peer_id)
        await echo_handler(stream)

    async with host.run(listen_addrs=[listen]), background_trio_service(protocol), trio.open_nursery() as nursery:
        host.set_stream_handler(ECHO, note_inbound)
        transport = CircuitV2Transport(host, protocol, config)
        dcutr = DCUtRProtocol(host) if args.dcutr else None
        if dcutr is not None and not args.dcutr_after:
            await nursery.start(_run_service, dcutr)
        relay_id, relay_addr = await connect_relay(host, args.relay)
        t = time.monotonic()
        stream = await host.new_stream(relay_id, [HOP_PROTOCOL_ID])
        ok = await transport.reserve(stream, relay_id, nursery)
        await stream.close()
        expire = transport._reservations.get(relay_id)
        circuit = f"{relay_addr}/p2p-circuit/p2p/{host.get_id()}"
        emit(
            "reserved",
            ok=ok,
            ms=round((time.monotonic() - t) * 1000, 2),
            ttl_s=None if expire is None else int(expire - time.time()),
            circuit_addr=circuit,
        )
        if args.autonat:
            await query_autonat(host, AutoNATService(host, serve=False, confirmations=1), relay_id)
        with trio.move_on_after(args.duration):
            peer = await arrivals.receive()
            arrived = time.monotonic()
            emit("inbound", peer=str(peer), kinds=conn_kinds(host, peer))
            # The other direction: we open a stream to the peer that reached us through the relay.
            back = await measure_echo(host, peer, rounds=args.rounds, bulk=args.bulk, label="listener->dialer")
            emit("echo", **back)
            if dcutr is not None and args.dcutr_after:
                await trio.sleep(max(0.0, arrived + args.dcutr_after - time.monotonic()))
                await nursery.start(_run_service, dcutr)
            if dcutr is not None:
                emit("upgrade", side="listener", **await watch_connections(host, peer, args.watch, "listener"))
            await trio.sleep_forever()
        nursery.cancel_scope.cancel()


async def _run_service(service, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    async with background_trio_service(service):
        task_status.started()
        await trio.sleep_forever()


async def role_dial(args: argparse.Namespace) -> None:
    host, listen = build_host(args.seed, args.ip, args.port, args.max_conns)
    protocol = CircuitV2Protocol(host, allow_hop=False)
    # Without CLIENT in the roles, dialling through a relay does not first take a reservation there.
    roles = RelayRole.STOP | RelayRole.CLIENT if args.reserve_on_dial else RelayRole.STOP
    async with host.run(listen_addrs=[listen]), background_trio_service(protocol), trio.open_nursery() as nursery:
        host.set_stream_handler(ECHO, echo_handler)
        transport = CircuitV2Transport(host, protocol, RelayConfig(roles=roles))
        dcutr = DCUtRProtocol(host) if args.dcutr else None
        if dcutr is not None and not args.dcutr_after:
            await nursery.start(_run_service, dcutr)
        with trio.move_on_after(args.duration):
            relay_id, relay_addr = await connect_relay(host, args.relay)
            target = ID.from_base58(args.target)
            circuit = multiaddr.Multiaddr(f"{relay_addr}/p2p-circuit/p2p/{target}")
            t = time.monotonic()
            try:
                with trio.fail_after(20):
                    await transport.dial(circuit)
            except Exception as error:
                emit("dialed", ok=False, error=f"{type(error).__name__}: {error}"[:300])
                return
            dialed = time.monotonic()
            emit("dialed", ok=True, ms=round((dialed - t) * 1000, 2), kinds=conn_kinds(host, target))
            emit(
                "echo", **await measure_echo(host, target, rounds=args.rounds, bulk=args.bulk, label="dialer->listener")
            )
            held = await hold_stream(host, target) if args.hold else None
            if dcutr is not None and args.dcutr_after:
                await trio.sleep(max(0.0, dialed + args.dcutr_after - time.monotonic()))
                await nursery.start(_run_service, dcutr)
            if dcutr is not None:
                watched = await watch_connections(host, target, args.watch, "dialer")
                emit("upgrade", side="dialer", **watched)
                if held is not None:
                    emit("held_stream", **await use_held_stream(held))
                if watched["first_direct_s"] is not None:
                    after = await measure_echo(host, target, rounds=args.rounds, bulk=args.bulk, label="after-dcutr")
                    emit("echo", **after)
            emit("done")
        nursery.cancel_scope.cancel()


async def hold_stream(host: IHost, peer: ID) -> INetStream:
    """An echo stream opened now (on the relayed connection) and kept open across a DCUtR upgrade."""
    stream = await host.new_stream(peer, [ECHO])
    await stream.write(b"held")
    await read_exactly(stream, 4)
    return stream


async def use_held_stream(stream: INetStream) -> dict:
    try:
        with trio.fail_after(5):
            await stream.write(b"still")
            ok = await read_exactly(stream, 5) == b"still"
        return {"ok": ok}
    except BaseException as error:
        if isinstance(error, trio.Cancelled):
            raise
        return {"ok": False, "error": describe(error)}


async def role_limits(args: argparse.Namespace) -> None:
    """Against a relay with small limits: a dial to a peer with no reservation, then a circuit's data
    cap (a bulk echo larger than it), then its duration cap (an echo after it lapsed), each on a new
    circuit to `--target`; reports what each side saw and how long the relay took to cut."""
    host, listen = build_host(args.seed, args.ip, args.port, args.max_conns)
    protocol = CircuitV2Protocol(host, allow_hop=False)
    async with host.run(listen_addrs=[listen]), background_trio_service(protocol):
        host.set_stream_handler(ECHO, echo_handler)
        transport = CircuitV2Transport(host, protocol, RelayConfig(roles=RelayRole.STOP))
        with trio.move_on_after(args.duration):
            relay_id, relay_addr = await connect_relay(host, args.relay)
            target = ID.from_base58(args.target)

            async def dial(peer: ID, label: str) -> bool:
                t = time.monotonic()
                try:
                    with trio.fail_after(20):
                        await transport.dial(multiaddr.Multiaddr(f"{relay_addr}/p2p-circuit/p2p/{peer}"))
                    emit("dialed", label=label, ok=True, ms=round((time.monotonic() - t) * 1000, 2))
                    return True
                except Exception as error:
                    ms = round((time.monotonic() - t) * 1000, 2)
                    emit("dialed", label=label, ok=False, ms=ms, error=f"{type(error).__name__}: {error}"[:300])
                    return False

            # The swarm drops /p2p-circuit addresses before dialling: host.connect() cannot use them.
            try:
                with trio.fail_after(10):
                    circuit = multiaddr.Multiaddr(f"{relay_addr}/p2p-circuit/p2p/{target}")
                    await host.connect(PeerInfo(target, [circuit]))
                emit("host_connect_circuit", ok=True, kinds=conn_kinds(host, target))
            except Exception as error:
                emit("host_connect_circuit", ok=False, error=describe(error))
            if args.no_reservation_target:
                await dial(ID.from_base58(args.no_reservation_target), "no-reservation")
            if await dial(target, "data-cap"):
                emit("echo", **await measure_echo(host, target, rounds=5, bulk=args.bulk, label="over-data-cap"))
                await trio.sleep(1.0)
                emit("conns", label="after-data-cap", kinds=conn_kinds(host, target))
            await _drop(host, target)
            if await dial(target, "duration-cap"):
                emit("echo", **await measure_echo(host, target, rounds=5, bulk=0, label="within-duration"))
                await trio.sleep(args.circuit_seconds + 1.5)
                emit("echo", **await measure_echo(host, target, rounds=5, bulk=0, label="after-duration", timeout=8))
                emit("conns", label="after-duration", kinds=conn_kinds(host, target))
            emit("done")


async def _drop(host: IHost, peer: ID) -> None:
    for conn in list(host.get_network().connections.get(peer, [])):
        try:
            await conn.close()
        except Exception:
            pass
    await trio.sleep(0.5)


async def role_autonat(args: argparse.Namespace) -> None:
    host, listen = build_host(args.seed, args.ip, args.port, args.max_conns)
    async with host.run(listen_addrs=[listen]):
        with trio.move_on_after(args.duration):
            relay_id, _ = await connect_relay(host, args.relay)
            await query_autonat(host, AutoNATService(host, serve=False, confirmations=1), relay_id)
            await ask_dialback(host, relay_id)
            emit("done")
            await trio.sleep(args.linger)  # still listening while the orchestrator checks the ground truth


async def role_reserve(args: argparse.Namespace) -> None:
    """Raw HOP RESERVE messages: one for ourselves, then `--squat` more each naming a made-up peer id
    (py-libp2p's relay reserves for whatever id the message names)."""
    host, listen = build_host(args.seed, args.ip, args.port, args.max_conns)
    async with host.run(listen_addrs=[listen]):
        with trio.move_on_after(args.duration):
            relay_id, _ = await connect_relay(host, args.relay)
            peers = [("self", host.get_id())]
            peers += [
                (f"made-up-{n}", ID.from_pubkey(create_identity_from_seed(seed_bytes(1000 + n)).public_key))
                for n in range(args.squat)
            ]
            for label, peer in peers:
                stream = await host.new_stream(relay_id, [HOP_PROTOCOL_ID])
                reserve = HopMessage(type=HopMessage.RESERVE, peer=CircuitPeerId(id=peer.to_bytes()))
                await write_delimited_msg(stream, reserve)
                with trio.fail_after(10):
                    answer = await read_delimited_msg(stream, HopMessage)
                emit(
                    "reserve_answer",
                    label=label,
                    status=int(answer.status),
                    ok=answer.status == 100,
                    for_peer=str(peer),
                )
                await stream.close()
            emit("done")
            await trio.sleep(args.linger)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=["relay", "listen", "dial", "autonat", "reserve", "limits"])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--ip", required=True)
    parser.add_argument("--port", type=int, default=4001)
    parser.add_argument("--relay", help="the relay's multiaddr, ending in /p2p/<id>")
    parser.add_argument("--target", help="peer id to dial through the relay")
    parser.add_argument("--duration", type=float, default=40.0, help="end after this many seconds at most")
    parser.add_argument("--linger", type=float, default=0.0, help="autonat: stay up this long after the queries")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--bulk", type=int, default=1 << 20)
    parser.add_argument("--no-reservation-target", help="limits: a peer id with no reservation to dial first")
    parser.add_argument("--squat", type=int, default=0, help="reserve: this many reservations for made-up ids")
    parser.add_argument("--dcutr", action="store_true")
    parser.add_argument(
        "--dcutr-after", type=float, default=0.0, help="start DCUtR this long after the relayed connection"
    )
    parser.add_argument("--hold", action="store_true", help="dial: keep a stream open across the upgrade")
    parser.add_argument("--autonat", action="store_true")
    parser.add_argument("--watch", type=float, default=15.0, help="seconds to watch for a DCUtR upgrade")
    parser.add_argument("--max-conns", type=int, default=1, help="ConnectionConfig.max_connections_per_peer")
    parser.add_argument("--reserve-on-dial", action="store_true", help="RelayRole.CLIENT on the dialer")
    parser.add_argument("--max-reservations", type=int, default=4)
    parser.add_argument("--max-circuits", type=int, default=8)
    parser.add_argument("--circuit-bytes", type=int, default=1 << 30)
    parser.add_argument("--circuit-seconds", type=int, default=3600)
    parser.add_argument("--reservation-ttl", type=int, default=3600)
    parser.add_argument("--log", default="WARNING", help="level of the libp2p loggers")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stdout, level=logging.WARNING, format="LOG %(name)s %(levelname)s %(message)s")
    libp2p_logger = logging.getLogger("libp2p")
    libp2p_logger.setLevel(args.log)
    libp2p_logger.propagate = True  # libp2p's own setup stops propagation unless LIBP2P_DEBUG is set
    for name in ("libp2p.relay.circuit_v2.dcutr", "libp2p.relay.circuit_v2.transport"):
        logging.getLogger(name).setLevel(min(logging.INFO, logging.getLevelName(args.log)))
    role = {"relay": role_relay, "listen": role_listen, "dial": role_dial, "autonat": role_autonat}
    role.update(reserve=role_reserve, limits=role_limits)
    t = time.monotonic()
    trio.run(role[args.role], args)
    emit("exit", role=args.role, seconds=round(time.monotonic() - t, 2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
