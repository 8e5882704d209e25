"""Records at the limits of their wire format (tests/explorer/extreme_helpers.py): every API route answers them
whole, as JSON a browser parses, with every signed time also given as its exact UTC date."""

from __future__ import annotations

import json

import pytest

from p2paudit.explorer.server import make_server, start_in_thread
from p2paudit.explorer.times import utc_text_ms
from tests.explorer.conftest import fetch
from tests.explorer.extreme_helpers import CHECKPOINT_TIME, EXTREME, LAST_STEP, build_extreme_ledger


@pytest.fixture(scope="module")
def extreme_server(tmp_path_factory):
    made = make_server("127.0.0.1:0", build_extreme_ledger(tmp_path_factory.mktemp("extreme")))
    start_in_thread(made)
    yield made
    made.shutdown()
    made.server_close()


RUN = EXTREME.hex()
ROUTES = (
    "",
    "/runs",
    f"/runs/{RUN}",
    f"/runs/{RUN}/coverage",
    f"/runs/{RUN}/coverage?from={LAST_STEP - 10}&buckets=11",
    f"/runs/{RUN}/steps/{LAST_STEP}",
    f"/runs/{RUN}/steps/0",
    f"/runs/{RUN}/init",
    "/disputes",
    f"/disputes?run={RUN}",
    "/equivocations",
    "/checkpoints",
    *(f"/entries/{n}" for n in range(8)),
    *(f"/entries/{n}/proof" for n in range(8)),
    "/node",
    "/peers",
)


def test_the_civil_date_of_every_signable_time():
    assert utc_text_ms(0) == "1970-01-01 00:00:00 UTC"
    assert utc_text_ms(1_700_000_000_001) == "2023-11-14 22:13:20.001 UTC"
    assert utc_text_ms(951_782_400_000) == "2000-02-29 00:00:00 UTC"  # a leap day of a year divisible by 400
    assert utc_text_ms(253_402_300_800_000) == "10000-01-01 00:00:00 UTC"  # past Python's datetime
    assert utc_text_ms(2**63 - 1) == "292278994-08-17 07:12:55.807 UTC"  # the largest time_ms


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_answers_extreme_records(extreme_server, route):
    reply = fetch(extreme_server, "/api/v1" + route)
    assert reply.status == 200, reply.body[:300]
    value = json.loads(reply.body, parse_constant=lambda name: pytest.fail(f"{route}: JSON has {name}"))
    for number, text in _times(value):  # every signed time also as its date: a browser cannot make one of all
        assert text == (utc_text_ms(number) if number is not None else None), (route, number, text)


def _times(value):
    """(number in ms, its text) for every time field anywhere in a JSON value."""
    if isinstance(value, list):
        for item in value:
            yield from _times(item)
    elif isinstance(value, dict):
        for number, text, scale in (
            ("time_ms", "time", 1),
            ("last_time_ms", "last_time", 1),
            ("timestamp", "time", 1000),
        ):
            if number in value:
                yield (None if value[number] is None else value[number] * scale), value.get(text, "absent")
        for item in value.values():
            yield from _times(item)


def test_signed_times_come_with_their_dates(extreme_server):
    step = fetch(extreme_server, f"/api/v1/runs/{RUN}/steps/{LAST_STEP}").json()
    times = {att["time_ms"]: att["time"] for att in step["attestations"]}
    assert times[2**63 - 2] == "292278994-08-17 07:12:55.806 UTC" and times[0] == "1970-01-01 00:00:00 UTC"
    run = fetch(extreme_server, f"/api/v1/runs/{RUN}").json()
    assert run["last_time"] == utc_text_ms(run["last_time_ms"])
    losses = {att["verifier"][:8]: (att["claimed_loss"], att["observed_loss"]) for att in step["attestations"]}
    assert ("inf", "nan") in losses.values() and ("inf", None) in losses.values()
    views = fetch(extreme_server, "/api/v1/checkpoints").json()
    assert [v["size_text"] for v in views["split_views"]] == [str(2**63 - 1)]  # exact, past JSON's 2^53 in a browser
    assert {v["size_text"] for v in views["peer_checkpoints"]} == {str(2**63 - 1)}
    cosignature = views["checkpoints"][0]["cosignatures"][0]
    assert cosignature["time"] == utc_text_ms(CHECKPOINT_TIME * 1000)
