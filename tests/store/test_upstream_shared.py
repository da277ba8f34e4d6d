"""One upstream breaker shared by every worker through the Redis store (real redis-server)."""

from __future__ import annotations

from otel_breaker.breaker import CircuitBreakerConfig, State
from otel_breaker.config import Settings
from otel_breaker.guards import Guard
from otel_breaker.registry import BreakerRegistry
from otel_breaker.toolcall import ToolCall
from otel_breaker.upstream import breaker_of

SETTINGS = Settings(
    upstreams={"serp": ("web_search", "news_*")},
    defaults=CircuitBreakerConfig(failure_threshold=3, recovery_timeout=60),
)


def refused() -> None:
    raise ConnectionRefusedError("connection refused")


def test_two_workers_share_one_upstream_breaker(make_store):
    first = BreakerRegistry(store=make_store(), settings=SETTINGS)
    second = BreakerRegistry(store=make_store(), settings=SETTINGS)
    runs = []

    def dead(name: str):
        def call() -> None:
            runs.append(name)
            refused()

        return call

    for name in ("web_search", "news_top", "news_local"):
        try:
            Guard(first).call(ToolCall(name), dead(name))
        except ConnectionRefusedError:
            pass
    assert len(runs) == 3
    assert breaker_of(first, "serp").state is State.OPEN
    # The other worker has never called these tools: its first call is rejected, no round trip.
    result = Guard(second).call(ToolCall("news_world"), dead("news_world"))
    assert len(runs) == 3
    assert result["circuit_open"] and result["upstream"] == "serp"
    assert breaker_of(second, "serp").state is State.OPEN
    # Tools outside the group are untouched.
    assert Guard(second).call(ToolCall("calculator"), lambda: 42) == 42
