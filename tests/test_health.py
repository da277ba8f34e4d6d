"""Health checks: run while open, in the background, never inside a tool call."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from otel_breaker import CircuitBreaker, CircuitBreakerConfig, State
from otel_breaker.breaker import add_global_listener, remove_global_listener
from otel_breaker.health import MONITOR, HealthMonitor


@pytest.fixture
def monitor():
    """A monitor the test drives by hand (the background one is switched off)."""
    monitor = HealthMonitor(background=False)
    remove_global_listener(MONITOR.on_transition)
    add_global_listener(monitor.on_transition)
    yield monitor
    remove_global_listener(monitor.on_transition)
    add_global_listener(MONITOR.on_transition)


def open_breaker(clock, check, **options) -> CircuitBreaker:
    config = CircuitBreakerConfig(
        failure_threshold=1, recovery_timeout=300, health_check=check, health_check_interval=30, **options
    )
    breaker = CircuitBreaker("api", config, clock=clock)
    breaker.force_open(duration=300)
    return breaker


def test_a_passing_check_moves_the_breaker_to_half_open_early(clock, monitor):
    results = [False, True]
    breaker = open_breaker(clock, lambda: results.pop(0))
    assert monitor.run_pending() == 0  # not due yet
    clock.advance(30)
    assert monitor.run_pending() == 1
    assert breaker.state is State.OPEN
    clock.advance(30)
    monitor.run_pending()
    assert breaker.state is State.HALF_OPEN
    assert breaker.retry_after == 0


def test_a_raising_check_keeps_it_open(clock, monitor):
    def broken():
        raise ConnectionError("still down")

    breaker = open_breaker(clock, broken)
    for _ in range(3):
        clock.advance(30)
        monitor.run_pending()
    assert breaker.state is State.OPEN
    assert monitor.pending() == 1


def test_checks_are_skipped_when_disabled_or_absent(clock, monitor):
    open_breaker(clock, lambda: True, enable_health_check=False)
    CircuitBreaker("plain", CircuitBreakerConfig(), clock=clock).force_open()
    assert monitor.pending() == 0


async def test_async_checks_run_on_the_loop_that_was_running(clock, monitor):
    loops = []

    async def check():
        loops.append(asyncio.get_running_loop())
        return True

    breaker = open_breaker(clock, check)
    clock.advance(30)
    await asyncio.to_thread(monitor.run_pending)
    assert loops == [asyncio.get_running_loop()]
    assert breaker.state is State.HALF_OPEN


def test_async_checks_without_a_loop(clock, monitor):
    async def check():
        return True

    breaker = open_breaker(clock, check)
    clock.advance(30)
    monitor.run_pending()
    assert breaker.state is State.HALF_OPEN


def test_the_background_thread_runs_checks_never_the_tool_call():
    checked = threading.Event()
    callers = []

    def check():
        callers.append(threading.current_thread().name)
        checked.set()
        return True

    config = CircuitBreakerConfig(
        failure_threshold=1, recovery_timeout=3600, health_check=check, health_check_interval=0.01
    )
    breaker = CircuitBreaker("bg", config)
    with pytest.raises(RuntimeError):
        breaker.call(lambda: (_ for _ in ()).throw(RuntimeError()))
    assert checked.wait(5)
    deadline = time.monotonic() + 5
    while breaker.state is not State.HALF_OPEN and time.monotonic() < deadline:
        checked.wait(0.01)
    assert breaker.state is State.HALF_OPEN
    assert callers[0] == "otel-breaker-health"
