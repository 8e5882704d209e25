"""Sending one input.

Part of the fuzzing harness of fuzz_peer.py. Raw TCP (multistream, the Noise handshake, yamux inside a
finished session) or a libp2p stream from a fresh identity.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import trio
from fuzz_corpus import (
    Corpus,
    noise_payload,
)
from fuzz_inputs import (
    MAX_NOISE_PLAINTEXT,
    MESHSUB,
    MS_HEADER,
    NOISE_MSG1,
    NOISE_MSG3,
    NOISE_NAME,
    NOISE_PAYLOAD,
    PING,
    TCP,
    YAMUX,
    Case,
    ms_line,
    noise_frame,
)
from libp2p import new_host
from libp2p.crypto.x25519 import X25519PrivateKey
from libp2p.custom_types import TProtocol
from libp2p.identity_utils import create_identity_from_seed
from libp2p.network.config import ConnectionConfig
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from libp2p.security.noise.transport import PROTOCOL_ID as NOISE_PROTOCOL_ID
from libp2p.security.noise.transport import Transport as NoiseTransport
from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX_PROTOCOL_ID
from libp2p.stream_muxer.yamux.yamux import Yamux
from noise.connection import Keypair as NoiseKeypair
from noise.connection import NoiseConnection

# -- raw TCP: multistream, Noise, yamux ----------------------------------------------------------------------


class RawConn:
    """A TCP connection with exact reads (and, once Noise is done, encrypted ones)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.noise: NoiseConnection | None = None
        self.plain = bytearray()
        self.stage = "connected"

    async def _fill(self) -> None:
        chunk = await self.stream.receive_some(65536)
        if not chunk:
            raise EOFError(f"connection closed with {len(self.buf)} bytes pending")
        self.buf += chunk

    async def read_exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def read_noise_message(self) -> bytes:
        return await self.read_exactly(int.from_bytes(await self.read_exactly(2), "big"))

    async def read_plain(self, n: int) -> bytes:
        while len(self.plain) < n:
            self.plain += self.noise.decrypt(await self.read_noise_message())
        out = bytes(self.plain[:n])
        del self.plain[:n]
        return out

    async def send_plain(self, data: bytes) -> None:
        for i in range(0, max(len(data), 1), MAX_NOISE_PLAINTEXT):
            await self.stream.send_all(noise_frame(self.noise.encrypt(data[i : i + MAX_NOISE_PLAINTEXT])))

    async def drain(self, timeout: float, limit: int = 1 << 20) -> str:
        """Read until the peer closes (or `timeout`, or `limit` bytes); says which."""
        got = len(self.buf)
        with trio.move_on_after(timeout):
            while got < limit:
                chunk = await self.stream.receive_some(65536)
                if not chunk:
                    return f"closed-by-daemon after {got} bytes"
                got += len(chunk)
            return f"read-limit {got} bytes"
        return f"still-open after {got} bytes"


async def _read_ms(read_exactly: Callable) -> bytes:
    value, shift = 0, 0
    for _ in range(9):
        byte = (await read_exactly(1))[0]
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return await read_exactly(value)
    raise EOFError("multistream length longer than 9 bytes")


async def _negotiate(send: Callable, read_exactly: Callable, name: bytes) -> None:
    await send(MS_HEADER + ms_line(name))
    header, answer = await _read_ms(read_exactly), await _read_ms(read_exactly)
    if header != b"/multistream/1.0.0\n" or answer != name + b"\n":
        raise EOFError(f"multistream answered {header!r} {answer!r} to {name!r}")


def _initiator(static_private: bytes) -> NoiseConnection:
    state = NoiseConnection.from_name(NOISE_NAME)
    state.set_keypair_from_private_bytes(NoiseKeypair.STATIC, static_private)
    state.set_as_initiator()
    state.start_handshake()
    return state


async def send_raw(host: str, port: int, case: Case, corpus: Corpus, timeout: float) -> str:
    """Deliver a raw-TCP case (see RAW_PROTOCOLS); returns what the daemon did, and at which stage a
    connection that broke broke."""
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError as error:
        return f"no-connection {type(error).__name__}"
    conn = RawConn(stream)
    try:
        with trio.fail_after(10):
            if case.protocol == TCP:
                return await _send_last(conn, case.data, timeout)
            conn.stage = "multistream /noise"
            await _negotiate(stream.send_all, conn.read_exactly, NOISE_PROTOCOL_ID.encode())
            if case.protocol == NOISE_MSG1:
                return await _send_last(conn, case.data, timeout)
            return await _after_msg1(conn, case, corpus, timeout)
    except (EOFError, OSError, trio.BrokenResourceError, trio.TooSlowError) as error:
        return f"dropped {type(error).__name__} at {conn.stage}"
    finally:
        with trio.move_on_after(1):
            await stream.aclose()


async def _send_last(conn: RawConn, data: bytes, timeout: float) -> str:
    """Write the case's bytes, half-close, and wait for the daemon to close (or `timeout`)."""
    conn.stage = "sending the input"
    if conn.noise is None:
        await conn.stream.send_all(data)
    else:
        await conn.send_plain(data)
    await conn.stream.send_eof()
    conn.stage = "draining"
    return await conn.drain(timeout)


async def _after_msg1(conn: RawConn, case: Case, corpus: Corpus, timeout: float) -> str:
    # A yamux case completes the handshake as an identity of its own: two connections of one peer at once
    # are refused (one connection per peer), and sessions follow each other faster than the daemon drops one.
    key_pair, static = corpus.author, corpus.noise_static
    if case.protocol == YAMUX:
        seed = hashlib.sha256(b"p2paudit fuzz yamux %d " % case.index + case.data).digest()
        key_pair, static = create_identity_from_seed(seed), hashlib.sha256(b"noise" + seed).digest()
    state = _initiator(static)
    conn.stage = "noise msg1/msg2"
    await conn.stream.send_all(noise_frame(bytes(state.write_message(b""))))
    state.read_message(await conn.read_noise_message())
    if case.protocol == NOISE_MSG3:
        return await _send_last(conn, case.data, timeout)
    payload = case.data if case.protocol == NOISE_PAYLOAD else noise_payload(key_pair, static)
    try:
        msg3 = bytes(state.write_message(payload))
    except Exception as error:  # the noise library refuses a payload over 65,535 bytes
        return f"unsendable {type(error).__name__}"
    conn.stage = "noise msg3"
    await conn.stream.send_all(noise_frame(msg3))
    if case.protocol == NOISE_PAYLOAD:
        return await _send_last(conn, b"", timeout)
    conn.noise = state
    conn.stage = "multistream /yamux/1.0.0"
    await _negotiate(conn.send_plain, conn.read_plain, YAMUX_PROTOCOL_ID.encode())
    return await _send_last(conn, case.data, timeout)


# -- libp2p streams from fresh identities ----------------------------------------------------------------------


def fuzz_host(seed: bytes):
    """A plain py-libp2p host (Noise, yamux) with the Ed25519 identity of `seed`; it listens nowhere."""
    key_pair = create_identity_from_seed(seed)
    noise_key = X25519PrivateKey.from_bytes(hashlib.sha256(b"noise" + seed).digest())
    return new_host(
        key_pair=key_pair,
        sec_opt={NOISE_PROTOCOL_ID: NoiseTransport(key_pair, noise_privkey=noise_key)},
        muxer_opt={YAMUX_PROTOCOL_ID: Yamux},
        listen_addrs=[],
        connection_config=ConnectionConfig(max_connections_per_peer=1, dial_timeout=5.0),
    )


async def _discard(stream) -> None:
    """Our side of the daemon's own pubsub stream: read and forget, so it treats us as a gossip peer."""
    try:
        while await stream.read(65536):
            pass
    except Exception:  # the stream or connection ended: nothing to do
        pass


class Session:
    """One fresh identity connected to the target, its host running in its own task (so that a failure inside
    the library's tasks ends this session, not the campaign)."""

    def __init__(self, seed: bytes) -> None:
        self.host = fuzz_host(seed)
        self.peer_id = str(self.host.get_id())
        self._stop = trio.Event()
        self.error: BaseException | None = None

    async def _serve(self, target: PeerInfo, task_status) -> None:
        async with self.host.run(listen_addrs=[]):
            for protocol in MESHSUB:
                self.host.set_stream_handler(TProtocol(protocol), _discard)
            with trio.fail_after(10):
                await self.host.connect(target)
            task_status.started()
            await self._stop.wait()

    async def run(self, target: PeerInfo, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            await self._serve(target, task_status)
        except Exception as error:  # the connection or the host failed: this session is over
            self.error = error

    def close(self) -> None:
        self._stop.set()


async def _reset(stream) -> None:
    with trio.move_on_after(1):
        try:
            await stream.reset()
        except Exception:  # already gone
            pass


async def send_stream(host, peer: ID, case: Case, read_timeout: float) -> str:
    """Open a stream on the case's protocol, write the bytes, half-close, read what comes back."""
    try:
        with trio.fail_after(5):
            stream = await host.new_stream(peer, [TProtocol(case.protocol)])
    except Exception as error:  # no stream: the caller probes and retries once on a fresh identity
        return f"no-stream {type(error).__name__}"
    got = 0
    try:
        with trio.fail_after(10):
            if case.data:
                await stream.write(case.data)
            await stream.close_write()
        if read_timeout <= 0:
            return "sent"
        with trio.move_on_after(read_timeout):
            while got < 1 << 20:
                chunk = await stream.read(65536)
                if not chunk:
                    return f"eof after {got} bytes"
                got += len(chunk)
        return f"still-open after {got} bytes"
    except trio.TooSlowError:
        return "write-stalled"
    except Exception as error:  # reset, closed connection: what the daemon did with the input
        name = type(error).__name__
        return f"eof after {got} bytes" if name == "StreamEOF" else f"reset after {got} bytes ({name})"
    finally:
        await _reset(stream)


async def ping(host, peer: ID, timeout: float = 3.0) -> bool:
    """One /ipfs/ping/1.0.0 round trip."""
    payload = hashlib.sha256(str(time.monotonic()).encode()).digest()
    try:
        with trio.fail_after(timeout):
            stream = await host.new_stream(peer, [TProtocol(PING)])
            try:
                await stream.write(payload)
                echo = b""
                while len(echo) < 32:
                    chunk = await stream.read(32 - len(echo))
                    if not chunk:
                        return False
                    echo += chunk
                return echo == payload
            finally:
                await _reset(stream)
    except Exception:  # any failure to round-trip is "no"
        return False
