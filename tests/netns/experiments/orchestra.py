"""Running p2pnode.py roles inside a fabric and collecting their EVENT lines (shared by the experiments)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))  # tests/, so that `netns.fabric` imports when run as a script

from netns.fabric import Fabric, Node, wait_for_line  # noqa: E402

NODE = str(HERE / "p2pnode.py")
PORT = 4001


@dataclass
class Role:
    """One p2pnode.py process and everything it printed."""

    name: str
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def wait(self, event: str, timeout: float) -> dict | None:
        """The fields of the next `event` (None if it did not come within `timeout` or the process ended)."""
        line, lines = wait_for_line(self.proc, f"EVENT {event} ", timeout)
        self.lines.extend(lines)
        return None if line is None else json.loads(line.split(f"EVENT {event} ", 1)[1])

    def latest(self, event: str, settle: float = 2.5) -> dict | None:
        """Read for `settle` seconds, then the last `event` seen (for periodic state lines)."""
        self.wait("\0never", settle)
        found = self.events(event)
        return found[-1] if found else None

    def finish(self, timeout: float) -> None:
        """Read what is left until the process exits (or `timeout`)."""
        self.wait("exit", timeout)

    def events(self, event: str) -> list[dict]:
        marker = f"EVENT {event} "
        return [json.loads(line.split(marker, 1)[1]) for line in self.lines if line.startswith(marker)]

    def logs(self, limit: int = 40) -> list[str]:
        return [line for line in self.lines if not line.startswith("EVENT ")][-limit:]


def start(net: Fabric, node: Node, role: str, seed: int, *extra: str) -> Role:
    proc = net.spawn_python(node, [NODE, role, "--seed", str(seed), "--ip", node.addr, "--port", str(PORT), *extra])
    return Role(f"{role}@{node.name}", proc)


def relay_addr(net: Fabric, node: Node, peer: str) -> str:
    return f"/ip4/{node.addr}/tcp/{PORT}/p2p/{peer}"


def require(condition: object, what: str, *roles: Role) -> None:
    if not condition:
        tail = "\n".join(f"--- {r.name}\n" + "\n".join(r.lines[-30:]) for r in roles)
        raise RuntimeError(f"{what}\n{tail}")


@contextmanager
def deadline(seconds: int = 58) -> Iterator[None]:
    """For a script run by hand: raise TimeoutError after `seconds`, so the fabric's exit cleans up and
    the script ends. (Not under pytest: pytest-timeout owns SIGALRM there.)"""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"experiment still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class Clock:
    def __init__(self) -> None:
        self.t = time.monotonic()

    def __call__(self) -> float:
        return round(time.monotonic() - self.t, 2)
