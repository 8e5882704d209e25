"""What a daemon runs: `DaemonConfig` (made by the CLI, or by a test)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from p2paudit.node.assign import auditor
from p2paudit.node.daemon.sources import LabOpener, RunSource
from p2paudit.node.net import ReachConfig
from p2paudit.run.http_guard import TransferLimits


@dataclass(frozen=True)
class DaemonConfig:
    """What a daemon runs: its runs, addresses, peers, policy, and when it stops.

    stop_when_covered: stop once every step of every run holds `redundancy`
    checks in this node's ledger, nothing new arrived for `linger` seconds and
    every connected peer was synced since (demos and tests); otherwise run
    until cancelled or for `duration` seconds.
    """

    runs: tuple[RunSource, ...]
    ledger_path: Path
    status_path: Path
    listen: tuple[str, ...] = ("/ip4/127.0.0.1/tcp/0",)
    peers: tuple[str, ...] = ()
    backend: str = "cpu"
    policy: auditor.AuditPolicy = field(default_factory=auditor.AuditPolicy)
    duration: float | None = None
    stop_when_covered: bool = False
    linger: float = 4.0
    mdns: bool = False
    # Labs whose run announcements (RUNS_TOPIC) this node audits; their runs are fetched into the cache.
    follow: frozenset[bytes] = frozenset()
    cache_dir: Path | None = None
    cache_size: int = 16 * 1024**3
    fetch_timeout: float = 60.0
    # Remote runs (--run URL), opened after the node serves peers; their signatures must name one of
    # `publishers` (when given); their redirects may leave the run's host only with `other_hosts`.
    urls: tuple[str, ...] = ()
    publishers: frozenset[bytes] | None = None
    other_hosts: bool = False
    # Lab runs (train-script's) met behind a URL or in an announcement are audited only with this opener
    # (--run-lab-code: node.daemon.lab_source.open_remote_lab); each replay runs the publisher's script here.
    # Local lab runs are opened by the CLI.
    open_lab: LabOpener | None = None
    # Announced addresses, relays (client and service), hole punching: the adapter's terms.
    reach: ReachConfig = ReachConfig()

    def transfer_limits(self) -> TransferLimits:
        """The limits of every request of a remote run: silence and rate window `fetch_timeout`, redirects."""
        return TransferLimits(read_timeout=self.fetch_timeout, other_hosts=self.other_hosts)
