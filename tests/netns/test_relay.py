"""What py-libp2p 0.8.1's circuit relay v2, DCUtR and AutoNAT do across the NAT fabric (docs/reachability.md).

Each test runs one experiment of tests/netns/experiments/ (real processes in namespaces) and asserts on
counts: bytes echoed, connection kinds, status codes. Some pin faults of the library, so that an
upgrade that changes them is noticed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import require_netns

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

sys.path.insert(0, str(Path(__file__).with_name("experiments")))

ROUNDS, BULK = 20, 256 * 1024


@pytest.fixture(scope="module")
def experiments():
    require_netns()
    import autonat
    import relay_dcutr
    import relay_limits

    return relay_dcutr, autonat, relay_limits


def _echo_complete(echo: dict, bulk: int = BULK) -> None:
    assert "error" not in echo, echo
    assert echo["echoed_small_bytes"] == ROUNDS * 32, echo
    assert echo["echoed_bulk_bytes"] == bulk, echo


def test_a_home_node_reserves_is_dialled_through_the_relay_echoes_both_ways_and_dcutr_goes_direct(experiments):
    relay_dcutr = experiments[0]
    result = relay_dcutr.run(dcutr=True, rounds=ROUNDS, bulk=BULK, watch=12)
    assert result["reservation"]["ok"] and result["reservation"]["ttl_s"] > 3500
    assert "/p2p-circuit/p2p/" in result["reservation"]["circuit_addr"]
    assert result["dialed"]["ok"] and result["dialed"]["kinds"] == ["relayed"]
    for direction in ("echo_dialer_to_listener", "echo_listener_to_dialer"):
        _echo_complete(result[direction])
        assert result[direction]["stream_kind"] == "relayed"
    # Both NATs keep the source port, so TCP simultaneous open from the listen ports gets through.
    for side in ("upgrade_dialer", "upgrade_listener"):
        assert result[side]["first_direct_s"] is not None, result[side]
        assert result[side]["history"][-1] == ["direct", "relayed"]
    _echo_complete(result["echo_after_dcutr"])
    assert result["echo_after_dcutr"]["stream_kind"] == "direct"
    assert result["seconds"] < 60


def test_with_one_connection_per_peer_a_late_hole_punch_cuts_the_relayed_connection_and_its_streams(experiments):
    """p2paudit's hosts allow one connection per peer. A direct connection that arrives after the relayed
    one has passed the swarm's 20 s grace period makes the swarm trim the relayed one at once, resetting a
    stream open on it. (With two per peer both stay, and DCUtR closes the relayed one after 60 s.)"""
    relay_dcutr = experiments[0]
    result = relay_dcutr.run(dcutr=True, max_conns=1, rounds=ROUNDS, bulk=BULK, watch=8, dcutr_after=22, hold=True)
    for side in ("upgrade_dialer", "upgrade_listener"):
        assert result[side]["history"] == [["relayed"], ["direct"]], result[side]
    assert result["held_stream"]["ok"] is False and "reset" in result["held_stream"]["error"].lower()
    _echo_complete(result["echo_after_dcutr"])
    assert result["echo_after_dcutr"]["stream_kind"] == "direct"


def test_behind_random_port_nats_dcutr_fails_and_the_relayed_connection_carries_on(experiments):
    relay_dcutr = experiments[0]
    result = relay_dcutr.run(dcutr=True, nat_mapping="random", rounds=ROUNDS, bulk=BULK, watch=8)
    for direction in ("echo_dialer_to_listener", "echo_listener_to_dialer"):
        _echo_complete(result[direction])
    for side in ("upgrade_dialer", "upgrade_listener"):
        assert result[side]["first_direct_s"] is None
        assert result[side]["history"] == [["relayed"]]
    assert "echo_after_dcutr" not in result


def test_autonat_v1_answers_ok_for_addresses_nobody_can_reach_and_a_real_dial_back_does_not(experiments):
    autonat = experiments[1]
    result = autonat.run()
    home, public = result["home"], result["public"]
    by_label = {a["label"]: a for a in home["autonat"]}
    assert by_label["listen_addrs"]["status"] == 101  # E_DIAL_REFUSED: the LAN address is not the observed IP
    # The fault: the server "dials" with host.connect(), which returns the connection the request came
    # on, so the router's address and an ephemeral port nobody listens on are reported reachable.
    assert by_label["observed_addrs"]["ok"] is True
    assert home["autonat_status"][-1]["status"] == 1  # AutoNATStatus.PUBLIC, for a node behind NAT
    assert {a["label"]: a["ok"] for a in public["autonat"]} == {"listen_addrs": True, "observed_addrs": True}
    # A dial-back on a new connection agrees with a plain TCP connect for every address asked about.
    checks = home["dialback"] + public["dialback"]
    assert len(checks) == 4
    assert [(c["ok"], c["truth"]) for c in checks] == [(False, False), (False, False), (True, True), (False, False)]


def test_relay_limits_reservations_for_made_up_ids_and_the_circuit_caps(experiments):
    relay_limits = experiments[2]
    result = relay_limits.run()
    assert result["listener_reserved"]["ok"]
    statuses = [a["status"] for a in result["squatter_answers"]]
    assert statuses == [100, 400, 201, 201]  # OK, an error answer (but the slot was taken), then full
    made_up = result["squatter_answers"][1]["for_peer"]
    assert made_up in result["relay_reservations"] and len(result["relay_reservations"]) == 3
    assert result["latecomer_reserved"]["ok"] is False  # a genuine node finds the table full
    # host.connect() cannot dial a /p2p-circuit address: the swarm filters them all out.
    assert [c["ok"] for c in result["host_connect_circuit"]] == [False]
    assert "relay-only" in result["host_connect_circuit"][0]["error"]
    dials = {d["label"]: d for d in result["dials"]}
    assert not dials["no-reservation"]["ok"] and "status 204" in dials["no-reservation"]["error"]
    assert dials["data-cap"]["ok"] and dials["duration-cap"]["ok"]
    echoes = {e["label"]: e for e in result["echoes"]}
    assert "error" in echoes["over-data-cap"] and echoes["over-data-cap"].get("echoed_bulk_bytes") is None
    assert "error" not in echoes["within-duration"]
    assert "error" in echoes["after-duration"]
    conns = {c["label"]: c["kinds"] for c in result["conns"]}
    assert conns["after-data-cap"] == []
    assert conns["after-duration"] == ["relayed"]  # a dead circuit still listed as a connection
