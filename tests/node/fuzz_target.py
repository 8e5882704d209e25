"""The daemon under test (a real process, restarted on its port) and the honest peer that checks it still serves.

Part of the fuzzing harness of fuzz_peer.py.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

import multiaddr
import trio
from fuzz_corpus import (
    Corpus,
)
from fuzz_inputs import (
    SYNC,
)
from libp2p.peer.id import ID
from libp2p.peer.peerinfo import PeerInfo
from node_helpers import wait_until

from p2paudit.node import wire
from p2paudit.node.daemon.status import read_status
from p2paudit.node.localnet import LocalNet, NodeSpec, start_node, stop, wait_listening
from p2paudit.node.protocols import sync

# -- the daemon under test -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_memory_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) of a live process, in KiB."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


@dataclass
class Generation:
    """One daemon process: its figures and how it ended."""

    pid: int
    started: float
    baseline_rss_kib: int = 0
    peak_hwm_kib: int = 0
    last_rss_kib: int = 0
    ended: str = ""  # "" while running; else "exit <code>" / "wedged" / "stopped"
    sessions: int = 0  # libp2p connections our fuzz identities completed to it
    raw: int = 0  # raw TCP connections opened to it


class Target:
    """One `p2paudit daemon` process on 127.0.0.1 at a fixed port (restarted on the same port and home)."""

    NAME = "fuzz-target"

    def __init__(self, home: Path, run_dir: Path, seconds: float, port: int | None = None) -> None:
        self.home, self.run_dir, self.seconds = home, run_dir, seconds
        self.port = port or free_port()
        self.net = LocalNet((NodeSpec(self.NAME, home),))
        self.generations: list[Generation] = []
        self.addr = ""
        self.peer_id = ""
        self._log_offset = 0

    def start(self) -> None:
        log = self.home / "daemon.log"
        self._log_offset = log.stat().st_size if log.exists() else 0
        # --duration bounds a daemon this process could not stop (it runs in a session of its own).
        extra = ("--duration", f"{self.seconds:.0f}", "--listen", f"/ip4/127.0.0.1/tcp/{self.port}", "--quiet")
        start_node(self.net, self.net.specs[0], self.run_dir, None, "reference", 1, extra)
        self.generations.append(Generation(self.proc.pid, time.time()))
        self.addr = wait_listening(self.net, self.NAME, timeout=60)
        self.peer_id = self.addr.rsplit("/", 1)[1]

    @property
    def proc(self):
        return self.net.processes[self.NAME]

    @property
    def info(self) -> PeerInfo:
        return PeerInfo(ID.from_base58(self.peer_id), [multiaddr.Multiaddr(self.addr.split("/p2p/")[0])])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def status_age(self) -> float | None:
        """Seconds since this process last wrote its status file (None: unreadable or another process's)."""
        try:
            status = read_status(self.home / "status.json")
        except Exception:  # mid-write or missing: no answer
            return None
        return time.time() - status["written_at"] if status.get("pid") == self.proc.pid else None

    def sample_memory(self) -> None:
        found = proc_memory_kib(self.proc.pid)
        if found is not None:
            gen = self.generations[-1]
            gen.last_rss_kib, gen.peak_hwm_kib = found[0], max(gen.peak_hwm_kib, found[1])

    def set_baseline(self) -> None:
        self.sample_memory()
        self.generations[-1].baseline_rss_kib = self.generations[-1].last_rss_kib

    def log_tail(self, lines: int = 40) -> str:
        with open(self.home / "daemon.log", "rb") as f:
            f.seek(self._log_offset)
            text = f.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def end(self, how: str) -> None:
        if self.generations and not self.generations[-1].ended:
            self.sample_memory()
            self.generations[-1].ended = how
        stop(self.net)


# -- the honest peer ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HonestRound:
    at: float  # seconds since the campaign began
    phase: str  # "during" or "after"
    generation: int
    ok: bool
    detail: str
    seconds: float


class Honest:
    """An honest node (the libp2p adapter) that must be served throughout: a signed sync status, and a fresh
    attestation it publishes stored in the daemon's ledger (found in a sync page proved under its checkpoint)."""

    def __init__(self, node, target: Target, corpus: Corpus) -> None:
        self.node, self.target, self.corpus = node, target, corpus
        self.rounds: list[HonestRound] = []
        self._connected_generation = -1
        self.count = 0

    async def _connect(self) -> None:
        generation = len(self.target.generations)
        if self._connected_generation == generation and self.target.peer_id in self.node.connected_peers():
            return
        await self.node.connect(self.target.addr)
        # Known on the topic: our publish (by fanout: we do not subscribe) goes to the daemon at once.
        await wait_until(lambda: self.target.peer_id in self.node.gossip_peers(self.corpus.topic), "the daemon", 20)
        self._connected_generation = generation

    async def _checkpoint(self):
        request = wire.encode_sync_request(wire.StatusRequest())
        answer = await self.node.request(self.target.peer_id, SYNC, request, max_response=wire.MAX_PAGE_BYTES)
        status = wire.decode_sync_response(answer)
        if not isinstance(status, wire.StatusResponse):
            raise AssertionError(f"status request answered with {type(status).__name__}")
        checkpoint = sync.open_peer_checkpoint(status.note)
        if checkpoint.origin != wire.ORIGIN_PREFIX + self.target.peer_id:
            raise AssertionError(f"status note of {checkpoint.origin}, want the daemon's")
        return checkpoint

    async def _entries(self, checkpoint, start: int) -> list[bytes]:
        out = []
        while start < checkpoint.size:
            count = min(wire.MAX_PAGE, checkpoint.size - start)
            request = wire.encode_sync_request(wire.RangeRequest(checkpoint.size, start, count))
            answer = await self.node.request(self.target.peer_id, SYNC, request, max_response=wire.MAX_PAGE_BYTES)
            page = wire.decode_sync_response(answer)
            if not isinstance(page, wire.Page):
                raise AssertionError(f"range request answered with {type(page).__name__}")
            out += sync.verify_page(checkpoint, page.start, page.entries, page.proof)
            start += len(page.entries)
        return out

    async def round(self, phase: str, began: float, timeout: float = 20.0) -> HonestRound:
        started = time.monotonic()
        self.count += 1
        envelope = self.corpus.honest_envelope(self.count)
        try:
            with trio.fail_after(timeout):
                await self._connect()
                before = await self._checkpoint()
                batch = wire.encode_batch(wire.GossipBatch(self.corpus.run_id, (envelope,)))
                await self.node.publish(self.corpus.topic, batch)
                scanned = before.size
                while True:
                    now = await self._checkpoint()
                    if now.size > scanned:
                        if envelope in await self._entries(now, scanned):
                            break
                        scanned = now.size
                    await trio.sleep(0.2)
            ok, detail = True, f"status ok, attestation stored at tree size <= {now.size}"
        except Exception as error:  # any failure of the honest exchange is the finding
            ok, detail = False, f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
        found = HonestRound(
            started - began, phase, len(self.target.generations), ok, detail, time.monotonic() - started
        )
        self.rounds.append(found)
        return found
