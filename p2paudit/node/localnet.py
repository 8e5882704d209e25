"""A network of daemons on loopback, each a real process with its own home: for the demo and the tests.

Node 0 starts first; every other node is told only node 0's address and finds
the rest by peer exchange. Each runs `p2paudit daemon --until-covered`, so the
network stops by itself once every step holds `redundancy` checks in every
ledger; `stop` kills whatever is left (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p2paudit.defaults import DEFAULT_REDUNDANCY
from p2paudit.errors import InternalError
from p2paudit.node.daemon.status import read_status

STATUS_FILE = "status.json"


@dataclass(frozen=True)
class NodeSpec:
    """One node: its name, home directory, and the step it lies about (None: honest)."""

    name: str
    home: Path
    lie_about_step: int | None = None


@dataclass
class LocalNet:
    """Started node processes, by name."""

    specs: tuple[NodeSpec, ...]
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    def status(self, name: str) -> dict[str, Any]:
        spec = next(s for s in self.specs if s.name == name)
        return read_status(spec.home / STATUS_FILE)


def _daemon_command(
    spec: NodeSpec, run_dir: Path, peer: str | None, backend: str, redundancy: int, extra: tuple[str, ...]
) -> list[str]:
    """The daemon's command line; it stops by itself once covered unless `extra` gives --duration."""
    stop_rule = [] if "--duration" in extra else ["--until-covered"]
    cmd = [sys.executable, "-m", "p2paudit", "daemon", "--run", str(run_dir), "--backend", backend]
    cmd += ["--redundancy", str(redundancy), *stop_rule, *extra]
    if peer is not None:
        cmd += ["--peer", peer]
    if spec.lie_about_step is not None:
        cmd += ["--lie-about-step", str(spec.lie_about_step)]
    return cmd


def start_node(
    net: LocalNet,
    spec: NodeSpec,
    run_dir: Path,
    peer: str | None,
    backend: str,
    redundancy: int,
    extra: tuple[str, ...] = (),
) -> None:
    """Start one daemon process (its output goes to HOME/daemon.log)."""
    spec.home.mkdir(parents=True, exist_ok=True)
    (spec.home / STATUS_FILE).unlink(missing_ok=True)
    log = spec.home / "daemon.log"
    env = dict(os.environ, P2PAUDIT_HOME=str(spec.home))
    with open(log, "ab") as out:
        net.processes[spec.name] = subprocess.Popen(
            _daemon_command(spec, run_dir, peer, backend, redundancy, extra),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    net.logs[spec.name] = log


def wait_listening(net: LocalNet, name: str, timeout: float = 60.0) -> str:
    """The first listen address node `name` reports, once its status file shows one."""
    deadline = time.monotonic() + timeout
    spec = next(s for s in net.specs if s.name == name)
    while time.monotonic() < deadline:
        path = spec.home / STATUS_FILE
        if path.exists():
            try:
                listen = json.loads(path.read_bytes()).get("listen") or []
            except ValueError:
                listen = []
            if listen and isinstance(listen[0], str):
                return listen[0]
        if net.processes[name].poll() is not None:
            raise InternalError(
                f"node {name} exited with {net.processes[name].returncode} before listening; see {net.logs[name]}"
            )
        time.sleep(0.2)
    raise InternalError(f"node {name} did not listen within {timeout:.0f}s; see {net.logs[name]}")


def start_network(
    specs: tuple[NodeSpec, ...],
    run_dir: Path,
    backend: str = "reference",
    redundancy: int = DEFAULT_REDUNDANCY,
    extra: tuple[str, ...] = (),
) -> LocalNet:
    """Start node 0, wait for its address, then every other node with only that address."""
    net = LocalNet(specs)
    first, *rest = specs
    start_node(net, first, run_dir, None, backend, redundancy, extra)
    try:
        address = wait_listening(net, first.name)
        for spec in rest:
            start_node(net, spec, run_dir, address, backend, redundancy, extra)
    except BaseException:
        stop(net)
        raise
    return net


def wait_all(net: LocalNet, timeout: float) -> dict[str, int | None]:
    """Wait until every node exits or `timeout` passes; returns each exit code (None: still running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(p.poll() is None for p in net.processes.values()):
        time.sleep(0.3)
    return {name: p.poll() for name, p in net.processes.items()}


def stop(net: LocalNet, grace: float = 5.0) -> None:
    """SIGTERM every node still running, then SIGKILL what is left after `grace` seconds."""
    for process in net.processes.values():
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for process in net.processes.values():
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
