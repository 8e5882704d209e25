"""The namespace fabric itself: NAT out works, nothing gets in, homes are apart, nothing is left behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .conftest import require_netns
from .fabric import PREFIX, Fabric, cleanup_leftovers, list_netns, wait_for_line

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PROBE = str(Path(__file__).with_name("tcp_probe.py"))
PORT = 4101


def _serve(net: Fabric, name: str, port: int = PORT) -> None:
    server = net.spawn_python(net.node(name), [PROBE, "server", str(port)])
    line, lines = wait_for_line(server, "READY", timeout=10)
    assert line is not None, f"probe server in {name} did not start: {lines}"


def _connect(net: Fabric, src: str, ip: str, timeout: float = 1.5, source_port: int = 0) -> str:
    args = [PROBE, "client", ip, str(PORT), str(timeout)] + ([str(source_port)] if source_port else [])
    done = net.python(net.node(src), args, timeout=timeout + 15, check=False)
    return done.stdout.strip()


def _host_links() -> str:
    names = [line.split(":")[1].strip() for line in _ip("-o", "link").splitlines()]
    return " ".join(sorted(names))


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10).stdout


def test_a_home_reaches_the_public_host_through_its_nat_and_is_seen_as_its_router(netns_fabric):
    net = netns_fabric
    _serve(net, "pub0")
    for i, home in enumerate(net.home_nodes):
        answer = _connect(net, home.name, net.node("pub0").addr, source_port=40000 + i)
        assert answer.startswith("OK SEEN "), answer
        _, _, seen_ip, seen_port = answer.split()
        assert seen_ip == net.router_wan_addr(i) != home.addr
        # Linux masquerade keeps the source port when it is free: the mapping is endpoint-independent
        # in practice, which is what hole punching with port prediction relies on.
        assert int(seen_port) == 40000 + i


def test_the_public_host_cannot_open_a_connection_to_a_home_host(netns_fabric):
    net = netns_fabric
    _serve(net, "home0")
    pub, router = net.node("pub0"), net.node("router0")
    # The home's own address is not routed on the internet.
    assert "Network is unreachable" in _connect(net, "pub0", net.home_addr(0))
    # Its router's public address: unsolicited, dropped silently (a time-out, not a refusal).
    assert "timed out" in _connect(net, "pub0", router.addr)
    # Even a peer that routes the home's /28 to the router explicitly is dropped by the router's forward filter.
    net.ip(pub, "route", "add", f"{net.home_addr(0)}/32", "via", router.addr)
    assert "timed out" in _connect(net, "pub0", net.home_addr(0))
    # The server was up all along: its own router's LAN side reaches it.
    assert _connect(net, "router0", net.home_addr(0)).startswith("OK SEEN ")


def test_two_home_hosts_cannot_reach_each_other_directly(netns_fabric):
    net = netns_fabric
    for name in ("home0", "home1"):
        _serve(net, name)
    for src, dst in ((0, 1), (1, 0)):
        assert "Network is unreachable" in _connect(net, f"home{src}", net.home_addr(dst))
        assert "timed out" in _connect(net, f"home{src}", net.router_wan_addr(dst))


def test_a_router_link_goes_down_and_up_again(netns_fabric):
    net = netns_fabric
    _serve(net, "pub0")
    router = net.node("router0")
    net.set_router_link(router, up=False)
    assert _connect(net, "home0", net.node("pub0").addr).startswith("FAIL ")
    net.set_router_link(router, up=True)
    assert _connect(net, "home0", net.node("pub0").addr, timeout=5).startswith("OK SEEN ")


def test_a_random_mapping_nat_changes_the_source_port():
    require_netns()
    with Fabric(homes=1, nat_mapping="random") as net:
        _serve(net, "pub0")
        kept = []
        # A new source port each time: the client that closes first holds its port in TIME_WAIT, so reusing
        # one port raced (CI saw EADDRINUSE on the second bind).
        for source_port in (40000, 40001, 40002):
            answer = _connect(net, "home0", net.node("pub0").addr, source_port=source_port)
            assert answer.startswith(f"OK SEEN {net.router_wan_addr(0)} "), answer
            kept.append(int(answer.split()[3]) == source_port)
        assert not all(kept), "a random-mapping NAT kept every source port"


def test_cleanup_leaves_nothing_behind_even_when_the_test_fails():
    require_netns()
    before_ns, before_links = sorted(list_netns("")), _host_links()
    with pytest.raises(RuntimeError, match="planted"):
        with Fabric(homes=2, public=2) as net:
            _serve(net, "pub0")
            _serve(net, "home1")
            assert len(list_netns(net.prefix)) == 1 + 2 + 2 * 2
            raise RuntimeError("planted failure")
    assert sorted(list_netns("")) == before_ns
    assert _host_links() == before_links


def test_leftovers_of_a_dead_run_are_removed_and_a_live_run_is_left_alone():
    require_netns()
    dead_pid = 2**22 + 12345  # above the default pid_max of 4194304: never a live process
    dead, live = f"{PREFIX}{dead_pid}-aaaaaa-home0", f"{PREFIX}{__import__('os').getpid()}-bbbbbb-home0"
    for name in (dead, live):
        subprocess.run(["ip", "netns", "add", name], check=True, timeout=10)
    try:
        removed = cleanup_leftovers()
        assert dead in removed and live not in removed
        assert live in list_netns() and dead not in list_netns()
    finally:
        for name in (dead, live):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
