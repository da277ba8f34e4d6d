"""Latency per breaker (p50, p99 over the last minute) from real guarded calls.

The breakers run on a fake clock that each tool moves forward by its own
duration, so a call's elapsed time is exact without sleeping; the recorder has
a fake clock of its own (when each call ended), moved past the minute by hand.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from otel_breaker import guard
from otel_breaker.latency import LATENCY, MAX_SAMPLES
from otel_breaker.registry import BreakerRegistry, default_registry
from otel_breaker.status_server import StatusServer


@pytest.fixture
def recorder_clock(clock) -> Iterator:
    """The process's recorder on a fake clock of the test's, switched on; as it was after."""
    saved = LATENCY.clock
    LATENCY.clock = clock
    LATENCY.enable()
    yield clock
    LATENCY.disable()
    LATENCY.clock = saved


def test_without_a_status_endpoint_guarded_calls_are_not_timed(registry_clock):
    assert LATENCY.enabled is False, "a status endpoint of an earlier test is still running"

    @guard("lookup")
    def lookup(seconds: float) -> str:
        registry_clock.advance(seconds)
        return "ok"

    @guard("fetch")
    def fetch() -> None:
        raise ConnectionError("refused")

    for _ in range(5):
        assert lookup(0.2) == "ok"
        with pytest.raises(ConnectionError):
            fetch()
    assert LATENCY.enabled is False
    assert LATENCY.percentiles(default_registry().get("lookup")) is None


async def test_an_async_tool_is_not_timed_either(registry_clock):
    assert LATENCY.enabled is False, "a status endpoint of an earlier test is still running"

    @guard("async_lookup")
    async def lookup() -> str:
        registry_clock.advance(0.2)
        return "ok"

    assert await lookup() == "ok"
    assert LATENCY.enabled is False
    assert LATENCY.percentiles(default_registry().get("async_lookup")) is None


def test_p50_and_p99_of_guarded_calls_in_the_last_minute(recorder_clock, registry_clock):
    @guard("search")
    def search(milliseconds: int) -> int:
        registry_clock.advance(milliseconds / 1000)
        return milliseconds

    @guard("flaky")
    def flaky(milliseconds: int) -> None:
        registry_clock.advance(milliseconds / 1000)
        raise ConnectionError("reset by peer")

    for milliseconds in range(100, 0, -1):  # 100 ms down to 1 ms, one call each
        search(milliseconds)
    p50, p99 = LATENCY.percentiles(default_registry().get("search"))
    assert p50 == pytest.approx(0.050) and p99 == pytest.approx(0.099)

    for milliseconds in (30, 10, 20, 900):  # calls that raise are timed too
        with pytest.raises(ConnectionError):
            flaky(milliseconds)
    p50, p99 = LATENCY.percentiles(default_registry().get("flaky"))
    assert p50 == pytest.approx(0.020) and p99 == pytest.approx(0.900)

    recorder_clock.advance(30)
    search(500)  # the one call of the last half minute is not alone: the older ones still count
    p50, p99 = LATENCY.percentiles(default_registry().get("search"))
    assert p50 == pytest.approx(0.051) and p99 == pytest.approx(0.100)
    recorder_clock.advance(31)  # the first hundred are more than a minute old now
    assert LATENCY.percentiles(default_registry().get("search")) == pytest.approx((0.5, 0.5))
    recorder_clock.advance(60)
    assert LATENCY.percentiles(default_registry().get("search")) is None
    assert LATENCY.percentiles(default_registry().get("flaky")) is None


async def test_async_calls_are_timed_and_only_the_latest_are_kept(recorder_clock, registry_clock):
    @guard("embed")
    async def embed(milliseconds: int) -> int:
        registry_clock.advance(milliseconds / 1000)
        return milliseconds

    for _ in range(100):
        await embed(5000)  # older than the kept ones: they no longer count
    for _ in range(MAX_SAMPLES):
        await embed(40)
    assert LATENCY.percentiles(default_registry().get("embed")) == pytest.approx((0.040, 0.040))


def test_a_status_endpoint_switches_timing_on_until_the_last_one_stops(clock):
    assert LATENCY.enabled is False, "a status endpoint of an earlier test is still running"
    registry = BreakerRegistry(clock=clock)
    search = registry.get("search")
    first = StatusServer("127.0.0.1", 0, registry=registry)
    second = None
    try:
        assert LATENCY.enabled is True
        second = StatusServer("127.0.0.1", 0, registry=registry)
        first.close()
        assert LATENCY.enabled is True  # the other endpoint still shows latency
        search.call(clock.advance, 0.25)
        assert LATENCY.percentiles(search, now=time.monotonic()) == pytest.approx((0.25, 0.25))
    finally:
        first.close()  # closing twice counts once
        if second is not None:
            second.close()
    assert LATENCY.enabled is False
    assert LATENCY.percentiles(search) is None  # what was kept is forgotten
