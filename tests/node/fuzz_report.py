"""What a campaign finds and reports.

Part of the fuzzing harness of fuzz_peer.py. Findings, per-protocol counts, the configuration and the
report.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from fuzz_inputs import (
    Case,
)
from fuzz_target import (
    Generation,
    HonestRound,
)

# -- the campaign ------------------------------------------------------------------------------------------------


@dataclass
class Finding:
    """The daemon stopped serving: "exit" (the process ended), "wedged" (alive, unreachable from a fresh
    identity), "stale" (alive, its status file not rewritten). Suspects: the last inputs sent, oldest first."""

    kind: str
    protocol: str
    suspects: list[Case]
    detail: str
    log_tail: str
    generation: int
    confirmed: Case | None = None
    confirm_detail: str = ""

    @property
    def signature(self) -> str:
        """The exception that ended the daemon and the innermost frame it names, from the log tail."""
        lines = [line.strip(" |") for line in self.log_tail.splitlines()]
        for i in range(len(lines) - 1, -1, -1):
            found = re.match(r"([\w.]+(?:Error|Exception|Exit)): ?(.*)", lines[i])
            if found and found.group(1) not in ("Error", "ExceptionGroup", "BaseExceptionGroup"):
                where = next((f for f in reversed(lines[:i]) if f.startswith("File ")), "")
                frame = re.match(r'File "(?:.*/)?([^/"]+)", line (\d+), in (\S+)', where)
                at = f" at {frame.group(1)}:{frame.group(2)} {frame.group(3)}" if frame else ""
                return f"{found.group(1)}: {found.group(2)[:100]}{at}"
        quiet = {"wedged": "alive, but admits no new connection", "stale": "alive, but its status file is stale"}
        return f"{self.kind}: {quiet.get(self.kind, 'no exception in the log tail')}"

    def describe(self) -> str:
        lines = [f"daemon {self.kind} ({self.detail}) while fuzzing {self.protocol}, daemon #{self.generation}"]
        lines.append(f"  cause: {self.signature}")
        if self.confirmed is not None:
            lines.append(f"  reproduced alone by: {self.confirmed.describe(400)}")
        elif self.confirm_detail:
            lines.append(f"  {self.confirm_detail}")
        lines.append(f"  last input sent: {self.suspects[-1].describe(400)}" if self.suspects else "  no input sent")
        tail = self.log_tail.splitlines()[-40:]
        lines.append("  daemon log tail:\n" + "\n".join("    " + line for line in tail))
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "signature": self.signature,
            "protocol": self.protocol,
            "detail": self.detail,
            "generation": self.generation,
            "confirmed": None if self.confirmed is None else self.confirmed.to_json(),
            "confirm_detail": self.confirm_detail,
            "suspects": [c.to_json() for c in self.suspects],
            "log_tail": self.log_tail,
        }


@dataclass
class ProtocolStats:
    protocol: str
    planned: int
    sent: int = 0
    skipped: int = 0  # not sent: the protocol reached its finding limit
    findings: int = 0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class FuzzConfig:
    per_protocol: int = 200
    seed: int = 0
    max_findings_per_protocol: int = 2  # then the rest of that protocol's inputs are skipped
    confirm_suspects: int = 3  # replay up to this many suspects alone, newest first, to find the culprit
    suspects: int = 8
    read_timeout: float = 1.0
    raw_timeout: float = 1.0
    honest_interval: float = 5.0
    stale_after: float = 15.0
    memory_factor: float = 2.0
    memory_slack_kib: int = 200 * 1024
    daemon_seconds: float = 1800.0  # each daemon's --duration: a daemon left behind stops by itself


@dataclass
class Report:
    stats: dict[str, ProtocolStats]
    findings: list[Finding]
    honest: list[HonestRound]
    generations: list[Generation]
    seconds: float
    record_path: Path
    final: str = ""  # the daemon's state at the end: "alive, status written 0.4 s ago" or why not

    def memory_failures(self, config: FuzzConfig) -> list[str]:
        out = []
        for i, gen in enumerate(self.generations, 1):
            bound = config.memory_factor * gen.baseline_rss_kib + config.memory_slack_kib
            if gen.baseline_rss_kib and gen.peak_hwm_kib > bound:
                out.append(
                    f"daemon #{i} (pid {gen.pid}) peaked at {gen.peak_hwm_kib / 1024:.0f} MiB resident, over "
                    f"{config.memory_factor:g} x {gen.baseline_rss_kib / 1024:.0f} MiB + {config.memory_slack_kib // 1024} MiB"
                )
        return out

    def failures(self, config: FuzzConfig) -> list[str]:
        """Every way the pass criteria were missed, each with its evidence."""
        out = [f.describe() for f in self.findings]
        died = {i for i, gen in enumerate(self.generations, 1) if gen.ended and gen.ended != "stopped"}
        lost = [r for r in self.honest if not r.ok and r.generation not in died]  # else: part of a finding
        out += [f"honest peer not served ({r.phase}, daemon #{r.generation}): {r.detail}" for r in lost]
        if not any(r.ok for r in self.honest if r.phase == "after"):
            out.append("the honest peer was not served after fuzzing")
        during = [r for r in self.honest if r.phase == "during"]
        if during and not any(r.ok for r in during):  # none at all: the campaign was shorter than one interval
            out.append(f"the honest peer was served in none of {len(during)} rounds during fuzzing")
        if not self.final.startswith("alive"):
            out.append(f"at the end the daemon is {self.final}")
        return out + self.memory_failures(config)

    def summary(self) -> str:
        lines = [f"{'protocol':<26}{'sent':>7}{'skipped':>8}{'inputs/s':>9}{'findings':>9}  outcomes"]
        for s in self.stats.values():
            outcomes = ", ".join(f"{k} {v}" for k, v in s.outcomes.most_common())
            lines.append(f"{s.protocol:<26}{s.sent:>7}{s.skipped:>8}{s.rate:>9.1f}{s.findings:>9}  {outcomes}")
        for i, gen in enumerate(self.generations, 1):
            lines.append(
                f"daemon #{i} pid {gen.pid}: resident {gen.baseline_rss_kib / 1024:.1f} MiB before fuzzing, "
                f"peak (VmHWM) {gen.peak_hwm_kib / 1024:.1f} MiB, last {gen.last_rss_kib / 1024:.1f} MiB; "
                f"{gen.sessions} sessions, {gen.raw} raw connections; {gen.ended or 'running'}"
            )
        ok = {p: sum(r.ok for r in self.honest if r.phase == p) for p in ("during", "after")}
        total = {p: sum(r.phase == p for r in self.honest) for p in ("during", "after")}
        lines.append(
            f"honest peer served: during {ok['during']}/{total['during']} rounds, after {ok['after']}/{total['after']}"
        )
        lines.append(f"daemon exits or wedges: {len(self.findings)}; at the end: {self.final}")
        causes = Counter((f.protocol, f.signature) for f in self.findings)
        lines += [f"  {n} x on {protocol}: {cause}" for (protocol, cause), n in causes.items()]
        lines.append(
            f"{sum(s.sent for s in self.stats.values())} inputs in {self.seconds:.1f} s; recorded in {self.record_path}"
        )
        return "\n".join(lines)
