"""A fuzzing harness against a `p2paudit daemon` running as a real process (test_fuzz.py, benchmarks/fuzz_bench.py).

Every protocol the daemon offers gets random, truncated, oversized and mutated inputs from fresh Ed25519
identities: libp2p streams (gossipsub RPCs on /meshsub/1.0.0, 1.1.0 and 1.2.0, sync, witness, peer exchange,
settled, Kademlia, identify and identify push, ping) and raw TCP below them (the multistream-select header,
the Noise XX handshake's first and third messages and its signed payload, yamux frames inside a finished
Noise session). Valid messages come first (wire encoders, real attestations of the run signed by a fuzz
key, a real witness request, signed pubsub messages, Kademlia and identify protobufs) and are then mutated;
random bytes are mixed in. The inputs of a protocol are a pure function of (seed, protocol, count), and each
one is recorded (protocol, kind, bytes) so that a failing one can be replayed (`fuzz_daemon(cases=...)`).

After every input a ping (on the fuzz connection, else on a fresh identity's) shows the daemon still
serves, and every 25 inputs a fresh identity must be admitted too (a daemon that serves the peers it has
but admits no new one is wedged for the network). A daemon that exits, cannot be reached, or stops
writing its status file is a `Finding` whose suspects are the last inputs sent; the daemon is restarted on
its port and fuzzing goes on, and at the end the first finding of each cause is replayed input by input on
a fresh daemon to name the culprit. An honest node (the adapter's open_node) asks for the sync status and
publishes a fresh attestation every few seconds, and checks it is stored (found in a sync page proved
under the daemon's signed checkpoint).

Here the campaign (`fuzz_daemon`, `Campaign`); its parts: fuzz_inputs (protocols, limits, `Case`, framing
and mutations), fuzz_corpus (valid messages to start from), fuzz_cases (each protocol's inputs), fuzz_send
(raw TCP and libp2p streams), fuzz_target (the daemon process and the honest peer), fuzz_report (findings
and the report).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

import trio
from fuzz_cases import (
    make_cases,
)
from fuzz_corpus import (
    Corpus,
    build_corpus,
    fuzz_key,
)
from fuzz_inputs import (
    ALL_PROTOCOLS,
    MESHSUB,
    RAW_PROTOCOLS,
    Case,
)
from fuzz_report import (
    Finding,
    FuzzConfig,
    ProtocolStats,
    Report,
)
from fuzz_send import (
    Session,
    ping,
    send_raw,
    send_stream,
)
from fuzz_target import (
    Honest,
    Target,
)

from p2paudit.identity import identity_from_seed

DEFAULT_CONFIG = FuzzConfig()


def honest_config():
    from p2paudit.node.net import NodeConfig

    return NodeConfig(
        listen=("/ip4/127.0.0.1/tcp/0",), peer_exchange_interval=3600.0, peer_exchange_max_interval=3600.0
    )


class Campaign:
    """Sends cases to the target one at a time, probing after each; restarts the daemon after a finding."""

    def __init__(
        self,
        target: Target,
        corpus: Corpus,
        config: FuzzConfig,
        record_path: Path,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.target, self.corpus, self.config = target, corpus, config
        self.record_path = record_path
        self.progress = progress or (lambda line: None)
        self.session: Session | None = None
        self.sessions = 0
        self.findings: list[Finding] = []
        self.stats: dict[str, ProtocolStats] = {}
        self.honest: Honest | None = None
        self.nursery: trio.Nursery | None = None
        self.began = time.monotonic()
        self._restarting = False

    # -- identities and probes ------------------------------------------------------------------------------

    async def renew(self) -> bool:
        """A fresh identity's connection to the target (the old one may be banned)."""
        if self.session is not None:
            self.session.close()
        self.sessions += 1
        seed = hashlib.sha256(b"p2paudit fuzz session %d %d" % (self.config.seed, self.sessions)).digest()
        session = Session(seed)
        try:
            await self.nursery.start(session.run, self.target.info)
        except Exception:  # refused or timed out: no session
            self.session = None
            return False
        self.session = session
        self.target.generations[-1].sessions += 1
        return True

    async def probe(self, fresh: bool = False) -> str:
        """ "ok" if the daemon answers a ping (from a fresh identity if need be, or if `fresh`: a daemon that
        serves the peers it has but admits no new one is wedged too); else "exit" or "wedged"."""
        if not self.target.alive():
            return "exit"
        if not fresh and self.session is not None and await ping(self.session.host, self.target.info.peer_id):
            return "ok"
        for _ in range(3):
            if not self.target.alive():
                return "exit"
            if await self.renew() and await ping(self.session.host, self.target.info.peer_id):
                return "ok"
            await trio.sleep(0.5)
        with trio.move_on_after(10):  # unreachable: dying, or wedged
            while self.target.alive():
                await trio.sleep(0.2)
        return "wedged" if self.target.alive() else "exit"

    async def deliver(self, case: Case) -> str:
        if case.protocol in RAW_PROTOCOLS:
            self.target.generations[-1].raw += 1
            return await send_raw("127.0.0.1", self.target.port, case, self.corpus, self.config.raw_timeout)
        read_timeout = 0.0 if case.protocol in MESHSUB else self.config.read_timeout
        for attempt in range(2):
            if self.session is None and not await self.renew():
                return "no-session"
            outcome = await send_stream(self.session.host, self.target.info.peer_id, case, read_timeout)
            if not outcome.startswith("no-stream") or attempt or await self.probe() != "ok":
                return outcome
        return outcome

    # -- the daemon's life ----------------------------------------------------------------------------------

    async def restart(self, how: str) -> None:
        self._restarting = True
        try:
            if self.session is not None:
                self.session.close()
                self.session = None
            await trio.to_thread.run_sync(self.target.end, how)
            await trio.to_thread.run_sync(self.target.start)
            await trio.sleep(1.0)
            self.target.set_baseline()
        finally:
            self._restarting = False

    def _detail(self, verdict: str) -> str:
        if verdict == "exit":
            return f"process exited with code {self.target.proc.poll()}"
        if verdict == "wedged":
            gen = self.target.generations[-1]
            return (
                f"process alive, but no fresh identity could connect and ping it for 10 s; it had taken "
                f"{gen.sessions} libp2p sessions and {gen.raw} raw TCP connections from us"
            )
        return f"status file not rewritten for {self.target.status_age():.0f} s"

    async def _found(self, verdict: str, protocol: str, suspects: list[Case]) -> Finding:
        # An exited daemon wrote its last words itself (its output is HOME/daemon.log, localnet.start_node): the
        # log tail is whole without a pause.
        finding = Finding(
            verdict, protocol, suspects, self._detail(verdict), self.target.log_tail(60), len(self.target.generations)
        )
        self.findings.append(finding)
        self.progress(
            f"FOUND: {finding.kind} ({finding.detail}) on {protocol}; last input "
            f"{suspects[-1].describe(120) if suspects else '-'}"
        )
        await self.restart(f"{verdict}: {finding.detail}")
        return finding

    async def _check(self, verdict: str, sent: int) -> str:
        """Every 25 inputs also: memory, the status file's age, and a connection from a fresh identity."""
        if verdict == "ok" and sent % 25 == 0:
            self.target.sample_memory()
            age = self.target.status_age()
            if age is not None and age > self.config.stale_after:
                return "stale"
            return await self.probe(fresh=True)
        return verdict

    # -- sending --------------------------------------------------------------------------------------------

    async def send_cases(self, cases: list[Case], stats: ProtocolStats, max_findings: float) -> None:
        recent: deque[Case] = deque(maxlen=self.config.suspects)
        started = time.monotonic()
        with open(self.record_path, "a") as record:
            for i, case in enumerate(cases):
                if stats.findings >= max_findings:
                    stats.skipped = len(cases) - i
                    break
                outcome = await self.deliver(case)
                recent.append(case)
                stats.sent += 1
                stats.outcomes[outcome.split()[0]] += 1
                verdict = await self._check(await self.probe(), stats.sent)
                item = {**case.to_json(), "outcome": outcome, "probe": verdict, "daemon": len(self.target.generations)}
                record.write(json.dumps(item) + "\n")
                if verdict != "ok":
                    record.flush()
                    stats.findings += 1
                    await self._found(verdict, case.protocol, list(recent))
                    recent.clear()
        stats.seconds += time.monotonic() - started
        self.target.sample_memory()

    async def confirm(self, finding: Finding) -> None:
        """Replay the suspects one at a time, newest first, each followed by a probe (and a second after a
        pause, for a late death): the first that ends the daemon alone is the culprit."""
        for case in list(reversed(finding.suspects))[: self.config.confirm_suspects]:
            outcome = await self.deliver(case)
            verdict = await self.probe()
            if verdict == "ok":
                await trio.sleep(1.0)
                verdict = await self.probe()
            if verdict != "ok":
                finding.confirmed = case
                finding.confirm_detail = f"alone it gave: {outcome}, then {verdict} ({self._detail(verdict)})"
                await trio.sleep(0.5)
                finding.log_tail = self.target.log_tail(60)
                await self.restart(f"{verdict} (confirming)")
                return
        tried = min(len(finding.suspects), self.config.confirm_suspects)
        finding.confirm_detail = f"none of the last {tried} inputs alone stopped a fresh daemon (suspects recorded)"

    async def _final_state(self) -> str:
        age = self.target.status_age()
        if not self.target.alive():
            return f"gone (exit code {self.target.proc.poll()})"
        if age is None or age > 5.0:
            return f"up but its status file is {'unreadable' if age is None else f'{age:.0f} s old'}"
        if await self.probe(fresh=True) != "ok":
            return f"up but it admits no new peer ({self._detail('wedged')})"
        return f"alive, status written {age:.1f} s ago, a new peer admitted"

    async def _honest_loop(self) -> None:
        while True:
            await trio.sleep(self.config.honest_interval)
            if not self._restarting:
                await self.honest.round("during", self.began)

    # -- a whole campaign -----------------------------------------------------------------------------------

    async def run(self, protocols: Iterable[str], cases: list[Case] | None = None) -> Report:
        """Fuzz each protocol in turn (or send `cases`, a replay); then confirm findings and check the honest
        peer once more."""
        from p2paudit.node.net import open_node

        self.began = time.monotonic()
        honest_key = identity_from_seed(fuzz_key("honest node"))
        async with open_node(honest_key, honest_config()) as node:
            self.honest = Honest(node, self.target, self.corpus)
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                first = await self.honest.round("before", self.began, timeout=40.0)
                self.progress(f"honest peer before fuzzing: {first.detail}")
                self.target.set_baseline()
                nursery.start_soon(self._honest_loop)
                await self._send_all(protocols, cases)
                confirmed = set()
                for finding in list(self.findings):  # the first of each cause on each protocol
                    if (finding.protocol, finding.signature) not in confirmed:
                        confirmed.add((finding.protocol, finding.signature))
                        await self.confirm(finding)
                after = await self.honest.round("after", self.began)
                self.progress(f"honest peer after fuzzing: {after.detail}")
                self.final = await self._final_state()
                self.target.sample_memory()
                nursery.cancel_scope.cancel()
        return Report(
            self.stats,
            self.findings,
            self.honest.rounds,
            self.target.generations,
            time.monotonic() - self.began,
            self.record_path,
            self.final,
        )

    async def _send_all(self, protocols: Iterable[str], cases: list[Case] | None) -> None:
        replay = cases is not None  # a replay sends every case, whatever happens
        for protocol in dict.fromkeys(c.protocol for c in cases) if replay else protocols:
            if replay:
                planned, limit = [c for c in cases if c.protocol == protocol], float("inf")
            else:
                planned = make_cases(protocol, self.corpus, self.config.seed, self.config.per_protocol)
                limit = self.config.max_findings_per_protocol
            stats = self.stats[protocol] = ProtocolStats(protocol, len(planned))
            await self.send_cases(planned, stats, limit)
            self.progress(
                f"{protocol}: {stats.sent} sent in {stats.seconds:.1f} s ({stats.rate:.0f}/s), "
                f"{stats.findings} finding(s), {stats.skipped} skipped"
            )


async def fuzz_daemon(
    run_dir: Path,
    work: Path,
    protocols: Iterable[str] = ALL_PROTOCOLS,
    config: FuzzConfig = DEFAULT_CONFIG,
    cases: list[Case] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Report:
    """Start a daemon on `run_dir` (home under `work`), fuzz it (or replay `cases`), stop it; the report.

    Inputs and outcomes are appended to work/fuzz-inputs.jsonl as they are sent; the findings, with their
    suspects and log tails, go to work/fuzz-findings.json."""
    work.mkdir(parents=True, exist_ok=True)
    corpus = build_corpus(run_dir, work)
    target = Target(work / "daemon", run_dir, config.daemon_seconds)
    record_path = work / "fuzz-inputs.jsonl"
    await trio.to_thread.run_sync(target.start)
    try:
        report = await Campaign(target, corpus, config, record_path, progress).run(protocols, cases)
    finally:
        target.end("stopped")
    findings = [f.to_json() for f in report.findings]
    (work / "fuzz-findings.json").write_text(json.dumps(findings, indent=1))
    return report
