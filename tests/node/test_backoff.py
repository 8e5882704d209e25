"""node.backoff and node.bounded_map: the one back-off and the one bounded map, on trio's clock (MockClock)."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from p2paudit.errors import InputError
from p2paudit.node.net._framing import TokenBucket
from p2paudit.node.timing.backoff import Backoff, BackoffPolicy, Backoffs
from p2paudit.node.timing.bounded_map import BoundedMap


def on_mock_clock(body) -> None:
    """Run `body` under trio with a MockClock that jumps whenever every task sleeps: no real waiting."""
    trio.run(body, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_schedule_starts_at_base_multiplies_and_stops_at_cap() -> None:
    policy = BackoffPolicy(base=3.0, cap=300.0)
    backoff, delays = Backoff(policy), []
    for _ in range(9):
        delays.append(backoff.failed(now=0.0))
    assert delays == [3.0, 6.0, 12.0, 24.0, 48.0, 96.0, 192.0, 300.0, 300.0]
    backoff.succeeded()
    assert (backoff.failed(now=10.0), backoff.not_before) == (3.0, 13.0)
    assert BackoffPolicy(1.0, 10.0, factor=3.0).after(3.0) == 9.0 and BackoffPolicy(1.0, 10.0, 3.0).after(9.0) == 10.0


@pytest.mark.parametrize(
    "base, cap, factor",
    [(0.0, 1.0, 2.0), (-1.0, 1.0, 2.0), (2.0, 1.0, 2.0), (1.0, math.inf, 2.0), (1.0, 2.0, 0.5), (math.nan, 1.0, 2.0)],
)
def test_a_schedule_that_would_not_wait_or_never_end_is_refused_with_its_numbers(base, cap, factor) -> None:
    with pytest.raises(InputError, match=f"got base={base} cap={cap} factor={factor}"):
        BackoffPolicy(base, cap, factor)


def test_a_back_off_waits_out_exactly_its_delay_on_trios_clock() -> None:
    async def body() -> None:
        backoff = Backoff(BackoffPolicy(30.0, 3600.0))
        assert backoff.ready(trio.current_time()) and backoff.wait(trio.current_time()) == 0.0
        began, waited = trio.current_time(), []
        for _ in range(8):
            failed_at = trio.current_time()
            delay = backoff.failed(failed_at)
            await trio.sleep_until(failed_at + delay - 0.001)
            assert not backoff.ready(trio.current_time())
            assert backoff.wait(trio.current_time()) == pytest.approx(0.001)
            await trio.sleep_until(failed_at + delay)
            assert backoff.ready(trio.current_time())
            waited.append(delay)
        assert waited == [30.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 3600.0]
        assert trio.current_time() - began == pytest.approx(sum(waited))  # 2 virtual hours, no real ones

    on_mock_clock(body)


def test_keyed_back_offs_are_separate_bounded_and_forgotten_on_success() -> None:
    backoffs: Backoffs[str] = Backoffs(BackoffPolicy(1.0, 8.0), max_size=3)
    assert [backoffs.failed("a", 0.0), backoffs.failed("a", 0.0), backoffs.failed("b", 0.0)] == [1.0, 2.0, 1.0]
    assert backoffs.waiting(0.5) == ["a", "b"] and backoffs.waiting(1.0) == ["a"]
    assert backoffs.wait("a", 0.5) == 1.5 and backoffs.not_before("b") == 1.0 and backoffs.not_before("z") is None
    backoffs.succeeded("a")
    assert backoffs.ready("a", 0.0) and backoffs.failed("a", 0.0) == 1.0  # starts at base again
    for key in "cde":  # past the bound the oldest failures go: they start afresh
        backoffs.failed(key, 0.0)
    assert len(backoffs) == 3 and "b" not in backoffs and backoffs.failed("b", 0.0) == 1.0


def test_a_bounded_map_drops_the_oldest_and_returns_them() -> None:
    seen: BoundedMap[str, int] = BoundedMap(max_size=3)
    assert [seen.put(k, i) for i, k in enumerate("abc")] == [[], [], []]
    assert seen.put("a", 10) == []  # put again: a is the newest now
    assert seen.put("d", 4) == [("b", 1)]
    assert list(seen) == ["c", "a", "d"] and seen.items() == [("c", 2), ("a", 10), ("d", 4)]
    assert seen.get("b") is None and seen.get("b", -1) == -1 and seen.pop("c") == 2 and len(seen) == 2
    with pytest.raises(InputError, match="max_size >= 1"):
        BoundedMap(0)
    with pytest.raises(InputError, match="max_age > 0"):
        BoundedMap(1, max_age=0.0)


def test_entries_are_over_at_their_age_or_their_own_time_on_trios_clock() -> None:
    async def body() -> None:
        asked: BoundedMap[str, None] = BoundedMap(max_size=10, max_age=60.0)
        bans: BoundedMap[str, str] = BoundedMap(max_size=10)
        t0 = trio.current_time()
        asked.put("peer", None, t0)
        bans.put("liar", "sent a bad page", t0, until=t0 + 600.0)
        bans.put("forever", "kept", t0)
        await trio.sleep_until(t0 + 59.999)
        assert asked.alive("peer", trio.current_time()) and bans.alive("liar", trio.current_time())
        await trio.sleep_until(t0 + 60.0)
        assert not asked.alive("peer", trio.current_time()) and asked.get("peer", now=trio.current_time()) is None
        assert "peer" in asked  # over, not yet taken out
        await trio.sleep_until(t0 + 600.0)
        now = trio.current_time()
        assert not bans.alive("liar", now) and bans.items(now) == [("forever", "kept")]
        assert bans.until("liar") == now
        assert bans.expire(now) == [("liar", "sent a bad page")] and list(bans) == ["forever"]
        assert asked.expire(now) == [("peer", None)] and len(asked) == 0

    on_mock_clock(body)


def test_a_token_bucket_refills_on_trios_clock() -> None:
    bucket = TokenBucket(rate=2.0, burst=3)  # made before the loop runs, as the daemon's follower makes one

    async def body() -> None:
        t0 = trio.current_time()
        assert [bucket.take() for _ in range(4)] == [True, True, True, False]
        await trio.sleep_until(t0 + 0.25)
        assert not bucket.take()  # half a token
        await trio.sleep_until(t0 + 0.75)
        assert bucket.take() and not bucket.take()  # one and a half: one taken
        await trio.sleep(3600.0)
        assert [bucket.take() for _ in range(4)] == [True, True, True, False]  # full is full, however long

    on_mock_clock(body)
