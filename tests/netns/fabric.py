"""A network of Linux network namespaces for tests: an "internet", public hosts and homes behind NATs.

    internet (bridge br0, 203.0.113.0/24)
      |-- pub0 ... pubN      203.0.113.10+j         public hosts, reachable by anyone on the bridge
      |-- router0 ... routerN 203.0.113.101+i (wan) each masquerades its home's LAN behind its wan address
            |-- home0 ... homeN  198.51.100.16*i+2 (lan), router 198.51.100.16*i+1, a /28 per home

Only the documentation ranges (RFC 5737) are used, and nothing is connected to the machine's own
namespace: every veth is created directly inside the namespaces it joins (`ip link add ... netns A
type veth peer ... netns B`), no namespace has a default route, and a home routes only the
internet's /24 to its router. Names carry a per-run prefix with the creating process id, so
leftovers of a crashed run (whose process is gone) are removed at the next start without touching
a run still in progress. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), iproute2 and nftables.

A home router is a typical home NAT: outbound connections are masqueraded (source port preserved
when free, which makes the mapping endpoint-independent in practice; `nat_mapping="random"` picks a
random port per connection, a symmetric NAT), replies come back through conntrack, and anything
unsolicited from the internet is dropped silently, to the router itself or forwarded.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

PREFIX = "p2pa-"
INTERNET_NET = "203.0.113"  # /24 on the bridge
HOME_NET = "198.51.100"  # one /28 per home
MAX_HOMES = 16
MAX_PUBLIC = 80
NAT_MAPPINGS = ("port-preserving", "random")


class FabricError(RuntimeError):
    """A command that builds or drives the fabric failed; carries the command and its stderr."""


@dataclass(frozen=True)
class Node:
    """One namespace of the fabric. `addr` is the address others reach it at: a public host's and a
    router's address on the internet, a home host's address on its LAN (reachable from its router only)."""

    role: str  # "internet", "public", "router", "home"
    name: str  # logical: "inet", "pub0", "router1", "home1"
    netns: str
    addr: str


@dataclass
class Fabric:
    """Build with `with Fabric(homes=2) as net:`; everything is removed on exit, even after an error."""

    homes: int = 2
    public: int = 1
    nat_mapping: str = "port-preserving"
    run_id: str = field(default_factory=lambda: f"{os.getpid()}-{secrets.token_hex(3)}")
    nodes: dict[str, Node] = field(default_factory=dict, init=False)
    _procs: list[subprocess.Popen] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if not 0 < self.homes <= MAX_HOMES or not 0 < self.public <= MAX_PUBLIC:
            raise ValueError(f"homes must be 1..{MAX_HOMES}, public 1..{MAX_PUBLIC}: {self.homes}, {self.public}")
        if self.nat_mapping not in NAT_MAPPINGS:
            raise ValueError(f"nat_mapping must be one of {NAT_MAPPINGS}: {self.nat_mapping!r}")

    # ---- names and addresses -------------------------------------------------------------------

    @property
    def prefix(self) -> str:
        return f"{PREFIX}{self.run_id}-"

    def _ns(self, name: str) -> str:
        return self.prefix + name

    def node(self, name: str) -> Node:
        return self.nodes[name]

    @property
    def public_nodes(self) -> list[Node]:
        return [self.nodes[f"pub{j}"] for j in range(self.public)]

    @property
    def home_nodes(self) -> list[Node]:
        return [self.nodes[f"home{i}"] for i in range(self.homes)]

    @property
    def router_nodes(self) -> list[Node]:
        return [self.nodes[f"router{i}"] for i in range(self.homes)]

    @staticmethod
    def public_addr(j: int) -> str:
        return f"{INTERNET_NET}.{10 + j}"

    @staticmethod
    def router_wan_addr(i: int) -> str:
        return f"{INTERNET_NET}.{101 + i}"

    @staticmethod
    def router_lan_addr(i: int) -> str:
        return f"{HOME_NET}.{16 * i + 1}"

    @staticmethod
    def home_addr(i: int) -> str:
        return f"{HOME_NET}.{16 * i + 2}"

    # ---- lifetime ------------------------------------------------------------------------------

    def __enter__(self) -> Fabric:
        cleanup_leftovers()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every process started in the fabric, then delete its namespaces (and with them every
        veth and the bridge). Safe to call twice and after a partial build."""
        for proc in self._procs:
            _stop(proc)
        self._procs.clear()
        for ns in list_netns(self.prefix):
            delete_netns(ns)
        self.nodes.clear()

    def _build(self) -> None:
        inet = self._add_ns("internet", "inet", f"{INTERNET_NET}.0")
        self.ip(inet, "link", "add", "br0", "type", "bridge")
        self.ip(inet, "link", "set", "br0", "up")
        for j in range(self.public):
            pub = self._add_ns("public", f"pub{j}", self.public_addr(j))
            self._wire(inet, f"p{j}", pub, "eth0")
            self._address(pub, "eth0", f"{pub.addr}/24")
        for i in range(self.homes):
            router = self._add_ns("router", f"router{i}", self.router_wan_addr(i))
            home = self._add_ns("home", f"home{i}", self.home_addr(i))
            self._wire(inet, f"r{i}", router, "wan")
            self._address(router, "wan", f"{router.addr}/24")
            self.ip(router, "link", "add", "lan", "netns", home.netns, "type", "veth", "peer", "name", "lan")
            self._address(router, "lan", f"{self.router_lan_addr(i)}/28")
            self._address(home, "eth0", f"{home.addr}/28", rename_from="lan")
            # Only the internet's /24, never a default route: nothing can leave the fabric.
            self.ip(home, "route", "add", f"{INTERNET_NET}.0/24", "via", self.router_lan_addr(i))
            self.exec(router, ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])
            self.exec(router, ["nft", "-f", "-"], input=_router_rules(self.nat_mapping))

    def _add_ns(self, role: str, name: str, addr: str) -> Node:
        node = Node(role, name, self._ns(name), addr)
        _run(["ip", "netns", "add", node.netns])
        self.nodes[name] = node
        self.ip(node, "link", "set", "lo", "up")
        return node

    def _wire(self, inet: Node, port: str, node: Node, ifname: str) -> None:
        """A veth from a bridge port in the internet namespace to `ifname` in `node`."""
        self.ip(inet, "link", "add", port, "type", "veth", "peer", "name", ifname, "netns", node.netns)
        self.ip(inet, "link", "set", port, "master", "br0")
        self.ip(inet, "link", "set", port, "up")

    def _address(self, node: Node, ifname: str, cidr: str, rename_from: str | None = None) -> None:
        if rename_from is not None:
            self.ip(node, "link", "set", rename_from, "name", ifname)
        self.ip(node, "addr", "add", cidr, "dev", ifname)
        self.ip(node, "link", "set", ifname, "up")

    # ---- driving it ----------------------------------------------------------------------------

    def ip(self, node: Node, *args: str) -> str:
        return _run(["ip", "-n", node.netns, *args]).stdout

    def exec(
        self, node: Node, argv: Sequence[str], timeout: float = 30, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` inside `node`'s namespace and wait for it (at most `timeout` seconds)."""
        return _run(["ip", "netns", "exec", node.netns, *argv], timeout=timeout, input=input, check=check)

    def python(
        self, node: Node, args: Sequence[str], timeout: float = 60, check: bool = True, env: dict | None = None
    ) -> subprocess.CompletedProcess[str]:
        """This interpreter (the venv's) inside `node`: `args` as after `python`."""
        argv = ["ip", "netns", "exec", node.netns, sys.executable, *args]
        return _run(argv, timeout=timeout, check=check, env=env)

    def spawn(self, node: Node, argv: Sequence[str], env: dict | None = None) -> subprocess.Popen[str]:
        """Start `argv` inside `node` without waiting; stdout is a pipe of text lines, stderr goes with it.
        The fabric stops it (SIGTERM, then SIGKILL) when it closes if it is still running."""
        proc = subprocess.Popen(
            ["ip", "netns", "exec", node.netns, *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,  # its own process group: stopping it stops its children
        )
        self._procs.append(proc)
        return proc

    def spawn_python(self, node: Node, args: Sequence[str], env: dict | None = None) -> subprocess.Popen[str]:
        return self.spawn(node, [sys.executable, "-u", *args], env=env)

    def set_router_link(self, router: Node, up: bool) -> None:
        """Take a router's internet link down or up (a partition of its home, and its heal)."""
        self.ip(router, "link", "set", "wan", "up" if up else "down")

    def conntrack_entries(self, router: Node) -> str:
        """The router's NAT table as text (`/proc/net/nf_conntrack` when the kernel offers it)."""
        done = self.exec(router, ["sh", "-c", "cat /proc/net/nf_conntrack 2>/dev/null || true"])
        return done.stdout


def _router_rules(nat_mapping: str) -> str:
    masquerade = "masquerade random" if nat_mapping == "random" else "masquerade"
    return f"""
table ip nat {{
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        oifname "wan" {masquerade}
    }}
}}
table inet filter {{
    chain forward {{
        type filter hook forward priority filter; policy drop;
        ct state established,related accept
        iifname "lan" oifname "wan" accept
    }}
    chain input {{
        type filter hook input priority filter; policy accept;
        iifname "wan" ct state established,related accept
        iifname "wan" drop
    }}
}}
"""


# ---- availability, leftovers, subprocess plumbing ------------------------------------------------


def unavailable_reason() -> str | None:
    """Why namespaces cannot be built here (one line), or None when they can."""
    if os.name != "posix" or not sys.platform.startswith("linux"):
        return f"network namespaces need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "network namespace tests need root (CAP_NET_ADMIN): run as root, as CI does"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"network namespace tests need {tool!r} (apt-get install {package}; scripts/install.sh does)"
    probe = f"{PREFIX}{os.getpid()}-probe{secrets.token_hex(3)}"
    try:
        _run(["ip", "netns", "add", probe], timeout=10)
    except (FabricError, subprocess.TimeoutExpired) as error:
        return f"cannot create a network namespace: {str(error).splitlines()[0][:200]}"
    try:
        done = _run(["ip", "netns", "exec", probe, "nft", "list", "tables"], timeout=10, check=False)
        if done.returncode != 0:
            return f"nftables does not work inside a namespace: {done.stderr.strip()[:200]}"
    finally:
        delete_netns(probe)
    return None


def list_netns(prefix: str = PREFIX) -> list[str]:
    """Names of the namespaces starting with `prefix` (all of ours by default)."""
    done = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip().startswith(prefix)]


def delete_netns(name: str) -> None:
    """Kill what still runs in the namespace (processes we started there, or their children), then delete it."""
    done = _run(["ip", "netns", "pids", name], check=False)
    for pid in {int(p) for p in done.stdout.split() if p.isdigit()}:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _run(["ip", "netns", "del", name], check=False)


def cleanup_leftovers() -> list[str]:
    """Delete namespaces of runs whose creating process is gone (a crash, a SIGKILL); returns their names."""
    removed = []
    for name in list_netns(PREFIX):
        owner = name[len(PREFIX) :].split("-", 1)[0]
        if owner.isdigit() and _alive(int(owner)):
            continue
        delete_netns(name)
        removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _run(
    argv: Sequence[str], timeout: float = 30, input: str | None = None, check: bool = True, env: dict | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, input=input, env=env)
    if check and done.returncode != 0:
        raise FabricError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:500]}")
    return done


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def fabric(homes: int = 2, public: int = 1, nat_mapping: str = "port-preserving") -> Iterator[Fabric]:
    with Fabric(homes=homes, public=public, nat_mapping=nat_mapping) as net:
        yield net


def wait_for_line(proc: subprocess.Popen[str], marker: str, timeout: float) -> tuple[str | None, list[str]]:
    """Read `proc`'s output until a line containing `marker` (returned) or `timeout` seconds or its exit
    (None). Also returns every line read, for error messages. Uses a reader thread per call's lifetime."""
    import queue
    import threading

    lines: list[str] = []
    if not hasattr(proc, "_line_queue"):
        q: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                q.put(line.rstrip("\n"))
            q.put(None)

        threading.Thread(target=pump, daemon=True).start()
        proc._line_queue = q  # type: ignore[attr-defined]
    q = proc._line_queue  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, lines
        try:
            line = q.get(timeout=left)
        except queue.Empty:
            return None, lines
        if line is None:
            q.put(None)  # keep the end visible to later calls
            return None, lines
        lines.append(line)
        if marker in line:
            return line, lines
