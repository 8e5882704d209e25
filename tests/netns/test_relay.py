"""What py-libp2p 0.8.1's circuit relay v2, DCUtR and AutoNAT do across the NAT fabric (docs/reachability.md).

Each test runs one experiment of tests/netns/experiments/ (real processes in namespaces) and asserts on
counts: bytes echoed, connection kinds, status codes. Some pin faults of the library, so that an
upgrade that changes them is noticed. Two findings are left to their experiments, run by hand (they cost
the suite 44 s and test configurations the adapter does not use; docs/reachability.md has their figures):
a late hole punch with one connection per peer resetting the relayed connection's streams
(`experiments/relay_dcutr.py`, one connection per peer, DCUtR after 22 s, holding a stream), and
AutoNAT v1 calling unreachable addresses reachable (`experiments/autonat.py`).
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
    import relay_dcutr
    import relay_limits

    return relay_dcutr, None, relay_limits


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


def test_behind_random_port_nats_dcutr_fails_and_the_relayed_connection_carries_on(experiments):
    relay_dcutr = experiments[0]
    result = relay_dcutr.run(dcutr=True, nat_mapping="random", rounds=ROUNDS, bulk=BULK, watch=8)
    for direction in ("echo_dialer_to_listener", "echo_listener_to_dialer"):
        _echo_complete(result[direction])
    for side in ("upgrade_dialer", "upgrade_listener"):
        assert result[side]["first_direct_s"] is None
        assert result[side]["history"] == [["relayed"]]
    assert "echo_after_dcutr" not in result


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
