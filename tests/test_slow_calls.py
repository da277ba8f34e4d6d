"""Slow calls (opt-in, resilience4j semantics): unset, a slow tool is never a broken tool."""

from __future__ import annotations

import logging

import pytest

from otel_breaker import CircuitBreaker, CircuitBreakerConfig, State
from otel_breaker.config import load_settings


def taking(clock, seconds):
    def tool():
        clock.advance(seconds)
        return "ok"

    return tool


def make(clock, **options) -> CircuitBreaker:
    return CircuitBreaker("scrape", CircuitBreakerConfig(**options), clock=clock)


def test_unset_a_slow_call_is_never_a_failure(clock):
    breaker = make(clock, minimum_calls=2)
    for _ in range(50):
        assert breaker.call(taking(clock, 3600)) == "ok"
    assert breaker.state is State.CLOSED and breaker.stats.failure_count == 0


def test_opens_once_the_slow_rate_over_the_window_reaches_the_rate(clock):
    breaker = make(clock, slow_call_seconds=2.0, slow_call_rate=0.5, minimum_calls=4, monitor_window=300)
    for seconds in (3, 0.1, 3):  # 2 of 3 slow: below minimum_calls
        assert breaker.call(taking(clock, seconds)) == "ok"
    assert breaker.state is State.CLOSED
    assert breaker.call(taking(clock, 0.1)) == "ok"  # 2 of 4: 0.5 >= 0.5
    assert breaker.state is State.OPEN
    assert breaker.call(taking(clock, 0.1))["circuit_open"] is True


def test_a_call_at_the_threshold_is_not_slow(clock):
    breaker = make(clock, slow_call_seconds=2.0, minimum_calls=3)
    for _ in range(10):
        breaker.call(taking(clock, 2.0))
    assert breaker.state is State.CLOSED


def test_without_a_rate_every_call_must_be_slow(clock):
    breaker = make(clock, slow_call_seconds=1.0, minimum_calls=3)
    for seconds in (5, 5, 0.5, 5, 5):
        breaker.call(taking(clock, seconds))
    assert breaker.state is State.CLOSED  # 4 of 5 slow < 1.0
    assert make(clock, slow_call_seconds=1.0, minimum_calls=1).call(taking(clock, 5)) == "ok"


def test_slow_calls_outside_the_window_are_forgotten_and_closing_clears_them(clock):
    breaker = make(clock, slow_call_seconds=1.0, slow_call_rate=0.6, minimum_calls=3, monitor_window=10)
    breaker.call(taking(clock, 5))
    breaker.call(taking(clock, 5))
    clock.advance(30)
    breaker.call(taking(clock, 0.1))
    breaker.call(taking(clock, 0.1))
    breaker.call(taking(clock, 5))
    assert breaker.state is State.CLOSED  # the early slow calls left the window


async def test_the_async_path_counts_slow_calls(clock):
    breaker = make(clock, slow_call_seconds=1.0, minimum_calls=2)

    async def tool():
        clock.advance(2)
        return "ok"

    await breaker.acall(tool)
    await breaker.acall(tool)
    assert breaker.state is State.OPEN


def test_per_tool_and_environment_settings_and_bad_values(caplog):
    settings = load_settings(
        {
            "OTEL_BREAKER_SLOW_CALL_SECONDS": "10",
            "OTEL_BREAKER_SLOW_CALL_RATE": "0.8",
            "OTEL_BREAKER_TOOLS": "scrape=slow_call_seconds=60,slow_call_rate=0.5",
        }
    )
    assert (settings.defaults.slow_call_seconds, settings.defaults.slow_call_rate) == (10.0, 0.8)
    scrape = settings.config_for("scrape")
    assert (scrape.slow_call_seconds, scrape.slow_call_rate) == (60.0, 0.5)
    with caplog.at_level(logging.WARNING, logger="otel_breaker"):
        bad = load_settings(
            {"OTEL_BREAKER_SLOW_CALL_SECONDS": "slow", "OTEL_BREAKER_SLOW_CALL_RATE": "2"}, strict=False
        )
    assert (bad.defaults.slow_call_seconds, bad.defaults.slow_call_rate) == (None, None)
    assert len([r for r in caplog.records if "OTEL_BREAKER_SLOW_CALL" in r.getMessage()]) == 2
    with pytest.raises(ValueError, match="slow_call_rate"):
        CircuitBreakerConfig(slow_call_rate=0)
