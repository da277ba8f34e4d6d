"""Latency per breaker (p50, p99 over the last minute) from real guarded calls.

The breakers run on a fake clock that each tool moves forward by its own
duration, so a call's elapsed time is exact without sleeping; the recorder has
a fake clock of its own (when each call ended), moved past the minute by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from otel_breaker import guard
from otel_breaker.latency import LATENCY, MAX_SAMPLES
from otel_breaker.registry import default_registry


@pytest.fixture
def recorder_clock(clock) -> Iterator:
    """The process's recorder on a fake clock of the test's, switched on; as it was after."""
    saved = LATENCY.clock
    LATENCY.clock = clock
    LATENCY.enable()
    yield clock
    LATENCY.disable()
    LATENCY.clock = saved


#: A process with no status endpoint: its guarded calls (sync and async, a success and a failure)
#: are not timed. Run in a fresh interpreter, so no endpoint another test left running can count.
UNTIMED = textwrap.dedent(
    """
    import asyncio, json
    from otel_breaker import guard
    from otel_breaker.latency import LATENCY
    from otel_breaker.registry import default_registry

    @guard("lookup")
    def lookup() -> str:
        return "ok"

    @guard("fetch")
    def fetch() -> None:
        raise ConnectionError("refused")

    @guard("async_lookup")
    async def async_lookup() -> str:
        return "ok"

    for _ in range(5):
        assert lookup() == "ok"
        try:
            fetch()
        except ConnectionError:
            pass
    assert asyncio.run(async_lookup()) == "ok"
    kept = [LATENCY.percentiles(default_registry().get(name)) for name in ("lookup", "fetch", "async_lookup")]
    print(json.dumps({"enabled": LATENCY.enabled, "kept": kept}))
    """
)


def test_without_a_status_endpoint_guarded_calls_are_not_timed():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", UNTIMED], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"enabled": False, "kept": [None, None, None]}


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


#: Two status endpoints in a fresh interpreter: timing is on from the first one's start until
#: the last one stops (closing one twice counts once), and what was kept is then forgotten.
SWITCHED = textwrap.dedent(
    """
    import json, time
    from otel_breaker.latency import LATENCY
    from otel_breaker.registry import BreakerRegistry
    from otel_breaker.status_server import StatusServer

    class Clock:
        now = 1000.0
        def __call__(self) -> float:
            return self.now
        def advance(self, seconds: float) -> None:
            self.now += seconds

    clock = Clock()
    registry = BreakerRegistry(clock=clock)
    search = registry.get("search")
    seen = {"before": LATENCY.enabled}
    first = StatusServer("127.0.0.1", 0, registry=registry)
    seen["one"] = LATENCY.enabled
    second = StatusServer("127.0.0.1", 0, registry=registry)
    first.close()
    first.close()
    seen["after_first_closed_twice"] = LATENCY.enabled
    search.call(clock.advance, 0.25)
    seen["kept"] = LATENCY.percentiles(search, now=time.monotonic())
    second.close()
    seen["after_last"] = LATENCY.enabled
    seen["forgotten"] = LATENCY.percentiles(search)
    print(json.dumps(seen))
    """
)


def test_a_status_endpoint_switches_timing_on_until_the_last_one_stops():
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", SWITCHED], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {
        "before": False,
        "one": True,
        "after_first_closed_twice": True,
        "kept": [0.25, 0.25],
        "after_last": False,
        "forgotten": None,
    }
