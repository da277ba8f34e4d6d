"""The state machine: thresholds, cooldowns, probes, backoff, modes, manual control."""

from __future__ import annotations

import asyncio
import math

import pytest

from otel_breaker import (
    PRESETS,
    ApprovalDeniedError,
    CircuitBreaker,
    CircuitBreakerConfig,
    CircuitOpenError,
    PermissionDeniedError,
    State,
)
from otel_breaker.breaker import PROBE_LEASE_SECONDS, REJECTED, SHADOW
from otel_breaker.classify import FAILURE, IGNORED, SUCCESS


class Boom(RuntimeError):
    pass


def fail() -> None:
    raise Boom("tool is down")


def ok() -> str:
    return "ok"


def trip(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        with pytest.raises(Boom):
            breaker.call(fail)


def make(clock, **options) -> CircuitBreaker:
    return CircuitBreaker("search", CircuitBreakerConfig(**options), clock=clock)


def test_defaults_are_the_ones_agent_users_know():
    config = CircuitBreakerConfig()
    assert (config.failure_threshold, config.recovery_timeout, config.success_threshold) == (5, 60.0, 2)
    assert (config.timeout, config.monitor_window, config.graceful_degradation) == (None, 300.0, True)
    assert (config.enable_health_check, config.health_check_interval) == (True, 30.0)
    assert config.half_open_max_calls == 1 and config.mode == "enforce"


def test_opens_after_consecutive_failures_and_rejects_without_calling(clock):
    breaker = make(clock, failure_threshold=3)
    trip(breaker, 2)
    assert breaker.state is State.CLOSED
    trip(breaker, 1)
    assert breaker.state is State.OPEN
    calls = []
    result = breaker.call(lambda: calls.append(1))
    assert calls == []
    assert result["circuit_open"] is True
    assert breaker.stats.rejected_requests == 1


def test_a_success_resets_the_failure_streak(clock):
    breaker = make(clock, failure_threshold=3)
    trip(breaker, 2)
    breaker.call(ok)
    trip(breaker, 2)
    assert breaker.state is State.CLOSED
    assert breaker.stats.consecutive_failures == 2


def test_scattered_failures_among_many_successes_do_not_open(clock):
    breaker = make(clock)
    for index in range(8005):
        if index % 1600 == 0:
            with pytest.raises(Boom):
                breaker.call(fail)
        else:
            breaker.call(ok)
    assert breaker.state is State.CLOSED
    assert breaker.stats.failure_count == 6


def test_failure_rate_threshold_opens_over_the_window(clock):
    breaker = make(clock, failure_threshold=100, failure_rate_threshold=0.5, minimum_calls=10, monitor_window=60)
    for index in range(9):
        if index % 2:
            breaker.call(ok)
        else:
            trip(breaker, 1)
    assert breaker.state is State.CLOSED  # below minimum_calls
    trip(breaker, 1)
    assert breaker.state is State.OPEN


def test_failure_rate_forgets_calls_outside_the_window(clock):
    breaker = make(clock, failure_threshold=100, failure_rate_threshold=0.5, minimum_calls=4, monitor_window=10)
    trip(breaker, 3)
    clock.advance(11)
    breaker.call(ok)
    breaker.call(ok)
    breaker.call(ok)
    trip(breaker, 1)
    assert breaker.state is State.CLOSED
    assert breaker.recent_failure_rate() == pytest.approx(0.25)


def test_cooldown_then_probe_success_closes(clock):
    breaker = make(clock, failure_threshold=2, recovery_timeout=30, success_threshold=2)
    trip(breaker, 2)
    assert breaker.retry_after == pytest.approx(30)
    clock.advance(29.9)
    assert breaker.call(ok)["circuit_open"] is True
    clock.advance(0.1)
    assert breaker.call(ok) == "ok"
    assert breaker.state is State.HALF_OPEN
    assert breaker.call(ok) == "ok"
    assert breaker.state is State.CLOSED


def test_probe_failure_reopens_with_backoff_capped(clock):
    breaker = make(clock, failure_threshold=1, recovery_timeout=10, backoff_multiplier=2.0, max_recovery_timeout=35)
    trip(breaker, 1)
    cooldowns = []
    for _ in range(4):
        cooldowns.append(breaker.retry_after)
        clock.advance(breaker.retry_after)
        trip(breaker, 1)  # the probe fails
    assert cooldowns == [10, 20, 35, 35]
    clock.advance(breaker.retry_after)
    breaker.call(ok)
    breaker.call(ok)
    assert breaker.state is State.CLOSED
    trip(breaker, 1)
    assert breaker.retry_after == 10  # backoff resets once closed


def test_only_half_open_max_calls_probes_at_once(clock):
    breaker = make(clock, failure_threshold=1, recovery_timeout=5, half_open_max_calls=2)
    trip(breaker, 1)
    clock.advance(5)
    first, second, third = breaker.try_acquire(), breaker.try_acquire(), breaker.try_acquire()
    assert isinstance(first, tuple) and isinstance(second, tuple)
    assert third == REJECTED


def test_a_result_from_before_the_opening_is_never_a_probe_result(clock):
    breaker = make(clock, failure_threshold=1, recovery_timeout=5, success_threshold=1)
    slow_permit = breaker.try_acquire()
    trip(breaker, 1)
    clock.advance(5)
    probe = breaker.try_acquire()
    breaker.on_outcome(slow_permit, SUCCESS)  # the slow call admitted while closed returns now
    assert breaker.state is State.HALF_OPEN
    breaker.on_outcome(probe, SUCCESS)
    assert breaker.state is State.CLOSED


def test_a_hung_probe_lease_expires_after_the_timeout(clock):
    breaker = make(clock, failure_threshold=1, recovery_timeout=5, timeout=3, success_threshold=1)
    trip(breaker, 1)
    clock.advance(5)
    hung = breaker.try_acquire()
    assert breaker.try_acquire() == REJECTED
    clock.advance(3.5)
    probe = breaker.try_acquire()
    assert isinstance(probe, tuple)
    breaker.on_outcome(hung, SUCCESS)  # too late: its lease is gone
    assert breaker.state is State.HALF_OPEN
    breaker.on_outcome(probe, SUCCESS)
    assert breaker.state is State.CLOSED


def test_a_hung_probe_lease_expires_without_a_timeout_too(clock):
    breaker = make(clock, failure_threshold=1, recovery_timeout=5, success_threshold=1)
    assert breaker.config.timeout is None
    trip(breaker, 1)
    clock.advance(5)
    hung = breaker.try_acquire()
    assert isinstance(hung, tuple)
    clock.advance(PROBE_LEASE_SECONDS - 1)
    assert breaker.try_acquire() == REJECTED  # the probe may still answer
    clock.advance(2)
    probe = breaker.try_acquire()
    assert isinstance(probe, tuple)  # the hung probe no longer holds the slot
    breaker.on_outcome(probe, SUCCESS)
    assert breaker.state is State.CLOSED


@pytest.mark.parametrize(
    "error",
    [
        ApprovalDeniedError("no"),
        PermissionDeniedError("no"),
        PermissionError("no"),
        asyncio.CancelledError(),
        KeyboardInterrupt(),
        SystemExit(1),
        GeneratorExit(),
        type("ToolApprovalDeniedError", (Exception,), {})("denied"),
        type("GraphInterrupt", (Exception,), {})("pause"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_denials_and_cancellation_never_count(clock, error):
    breaker = make(clock, failure_threshold=1, recovery_timeout=1, success_threshold=1)

    def raise_it():
        raise error

    with pytest.raises(type(error)):
        breaker.call(raise_it)
    assert breaker.state is State.CLOSED
    assert breaker.stats.ignored_count == 1 and breaker.stats.failure_count == 0
    # ... and a denial must not close a half-open breaker either
    trip(breaker, 1)
    clock.advance(1)
    with pytest.raises(type(error)):
        breaker.call(raise_it)
    assert breaker.state is State.HALF_OPEN


def test_ignore_and_record_exceptions_and_predicates(clock):
    breaker = make(clock, failure_threshold=1, ignore_exceptions=(KeyError,))
    with pytest.raises(KeyError):
        breaker.call(lambda: {}["x"])
    assert breaker.state is State.CLOSED

    only_timeouts = make(clock, failure_threshold=1, record_exceptions=(TimeoutError,))
    trip(only_timeouts, 1)
    assert only_timeouts.state is State.CLOSED

    def raise_timeout():
        raise TimeoutError

    with pytest.raises(TimeoutError):
        only_timeouts.call(raise_timeout)
    assert only_timeouts.state is State.OPEN

    predicate = make(clock, failure_threshold=1, is_failure=lambda exc: "fatal" in str(exc))
    with pytest.raises(RuntimeError):
        predicate.call(lambda: (_ for _ in ()).throw(RuntimeError("minor")))
    assert predicate.state is State.CLOSED


def test_semantic_failures_from_a_result_validator(clock):
    breaker = make(clock, failure_threshold=2, is_failure_result=lambda r: isinstance(r, dict) and "error" in r)
    assert breaker.call(lambda: {"error": "quota exceeded"}) == {"error": "quota exceeded"}
    breaker.call(lambda: {"error": "quota exceeded"})
    assert breaker.state is State.OPEN


def test_a_broken_validator_never_fails_a_healthy_call(clock):
    breaker = make(clock, failure_threshold=1, is_failure_result=lambda r: 1 / 0)
    assert breaker.call(ok) == "ok"
    assert breaker.state is State.CLOSED


def test_slow_sync_calls_count_as_failures_when_they_return(clock):
    breaker = make(clock, failure_threshold=1, timeout=2)

    def slow():
        clock.advance(3)
        return "late but fine"

    assert breaker.call(slow) == "late but fine"
    assert breaker.state is State.OPEN


@pytest.mark.parametrize(
    "config", [CircuitBreakerConfig(failure_threshold=1), CircuitBreakerConfig.preset("slow_tool")]
)
def test_a_slow_healthy_sync_call_is_never_a_failure_by_default(clock, config):
    breaker = CircuitBreaker("compile", config, clock=clock)

    def compile_project():
        clock.advance(45)  # a 45 s compile that succeeds
        return "built"

    for _ in range(3):
        assert breaker.call(compile_project) == "built"
    assert breaker.state is State.CLOSED and breaker.stats.failure_count == 0


async def test_a_slow_healthy_async_call_is_not_cancelled_by_default():
    breaker = CircuitBreaker("scrape", CircuitBreakerConfig(failure_threshold=1))
    release = asyncio.Event()

    async def scrape():
        await release.wait()
        return "page"

    task = asyncio.ensure_future(breaker.acall(scrape))
    for _ in range(50):  # the tool is still running: nothing cancels it
        await asyncio.sleep(0)
    assert not task.done()
    release.set()
    assert await task == "page"
    assert breaker.state is State.CLOSED


async def test_async_calls_are_cancelled_at_the_timeout():
    from otel_breaker import ToolTimeoutError

    breaker = CircuitBreaker("slow", CircuitBreakerConfig(failure_threshold=1, timeout=0.05))
    started = asyncio.Event()

    async def hang():
        started.set()
        await asyncio.Event().wait()

    with pytest.raises(ToolTimeoutError):
        await breaker.acall(hang)
    assert started.is_set() and breaker.state is State.OPEN


async def test_async_and_sync_paths_apply_the_same_rules(clock):
    sync_breaker = make(clock, failure_threshold=2, recovery_timeout=5)
    async_breaker = make(clock, failure_threshold=2, recovery_timeout=5)

    async def afail():
        raise Boom("down")

    async def aok():
        return "ok"

    for _ in range(2):
        with pytest.raises(Boom):
            sync_breaker.call(fail)
        with pytest.raises(Boom):
            await async_breaker.acall(afail)
    assert sync_breaker.state is async_breaker.state is State.OPEN
    assert sync_breaker.call(ok) == await async_breaker.acall(aok)
    assert sync_breaker.stats == async_breaker.stats


async def test_acall_accepts_plain_functions(clock):
    breaker = make(clock)
    assert await breaker.acall(ok) == "ok"


def test_decorator_on_sync_and_async_functions(clock):
    breaker = make(clock, failure_threshold=1)

    @breaker
    def tool(x):
        return x * 2

    @breaker
    async def atool(x):
        return x * 3

    assert tool(2) == 4
    assert asyncio.run(atool(2)) == 6
    assert tool.breaker is breaker and atool.breaker is breaker
    assert breaker.stats.success_count == 2


def test_graceful_result_shape(clock):
    breaker = CircuitBreaker("web_search", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=42), clock=clock)
    trip(breaker, 1)
    result = breaker.call(ok)
    assert set(result) >= {"error", "circuit_open", "tool", "agent_name", "session_id", "retry_after_s", "remediation"}
    assert result["error"] == "Tool 'web_search' circuit breaker open - too many recent failures"
    assert result["circuit_open"] is True and result["tool"] == "web_search"
    assert result["retry_after_s"] == 42
    assert "retried in about 42s" in result["remediation"]
    clock.advance(2)
    assert breaker.call(ok)["retry_after_s"] == 40  # the cached result follows the clock
    result["tool"] = "mutated"
    assert breaker.call(ok)["tool"] == "web_search"  # callers get copies


def test_raises_circuit_open_error_without_graceful_degradation(clock):
    breaker = make(clock, failure_threshold=1, recovery_timeout=9, graceful_degradation=False)
    trip(breaker, 1)
    with pytest.raises(CircuitOpenError) as caught:
        breaker.call(ok)
    assert caught.value.tool == "search" and caught.value.state is State.OPEN
    assert caught.value.retry_after == 9


def test_observe_mode_never_blocks_but_counts_what_it_would_reject(clock):
    breaker = make(clock, failure_threshold=2, recovery_timeout=10, mode="observe")
    trip(breaker, 2)
    assert breaker.state is State.OPEN
    assert breaker.try_acquire() == SHADOW
    ran = []
    assert breaker.call(lambda: ran.append(1) or "ran") == "ran"
    assert ran == [1]
    assert breaker.stats.rejected_requests == 2
    # outcomes of calls enforce mode would have rejected never move the state
    trip(breaker, 3)
    clock.advance(10)
    breaker.call(ok)
    breaker.call(ok)
    assert breaker.state is State.CLOSED


def test_manual_control_and_listeners(clock):
    breaker = make(clock)
    changes = []
    breaker.on_state_change(changes.append)
    breaker.force_open()
    assert breaker.state is State.OPEN and math.isinf(breaker.retry_after)
    clock.advance(10_000)
    assert breaker.state is State.OPEN  # forced open stays open
    assert breaker.call(ok)["retry_after_s"] is None
    breaker.force_close()
    assert breaker.state is State.CLOSED
    breaker.force_open(duration=5)
    clock.advance(5)
    assert breaker.state is State.HALF_OPEN
    assert [(c.from_state, c.to_state, c.reason) for c in changes] == [
        (State.CLOSED, State.OPEN, "manual"),
        (State.OPEN, State.CLOSED, "manual"),
        (State.CLOSED, State.OPEN, "manual"),
        (State.OPEN, State.HALF_OPEN, "cooldown_elapsed"),
    ]


def test_reset_starts_stats_over_but_lifetime_counts_stay(clock):
    breaker = make(clock, failure_threshold=2)
    trip(breaker, 2)
    breaker.call(ok)
    breaker.reset()
    stats = breaker.stats
    assert stats.state is State.CLOSED
    assert (stats.failure_count, stats.rejected_requests, stats.total_requests, stats.opened_count) == (0, 0, 0, 0)
    assert breaker.lifetime_counts() == (0, 2, 0, 1, 0)


def test_stats_fields(clock):
    breaker = make(clock, failure_threshold=2)
    breaker.call(ok)
    trip(breaker, 2)
    breaker.call(ok)
    stats = breaker.stats
    assert stats.success_count == 1 and stats.failure_count == 2
    assert stats.total_requests == 4 and stats.rejected_requests == 1
    assert stats.consecutive_failures == 2 and stats.opened_count == 1
    assert stats.last_state_change == clock.now


def test_listener_errors_are_contained(clock):
    breaker = make(clock, failure_threshold=1)
    breaker.on_state_change(lambda change: 1 / 0)
    trip(breaker, 1)
    assert breaker.state is State.OPEN


def test_presets_from_the_pattern_table():
    assert PRESETS["fast_api"] == {"failure_threshold": 3, "recovery_timeout": 30.0}
    # a slow tool is not a broken tool: no preset carries a per-call timeout
    assert all(CircuitBreakerConfig.preset(name).timeout is None for name in PRESETS)
    assert CircuitBreakerConfig.preset("slow_tool", timeout=90).timeout == 90
    assert CircuitBreakerConfig.preset("slow_tool").failure_threshold == 2
    assert CircuitBreakerConfig.preset("slow_tool").recovery_timeout == 120.0
    assert CircuitBreakerConfig.preset("code_executor", success_threshold=1).recovery_timeout == 60.0
    with pytest.raises(ValueError, match="unknown preset"):
        CircuitBreakerConfig.preset("nope")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"failure_threshold": 0}, "failure_threshold=0"),
        ({"recovery_timeout": -1}, "recovery_timeout=-1"),
        ({"failure_rate_threshold": 1.5}, "failure_rate_threshold=1.5"),
        ({"mode": "strict"}, "mode='strict'"),
        ({"backoff_multiplier": 0.5}, "backoff_multiplier=0.5"),
        ({"half_open_max_calls": 0}, "half_open_max_calls=0"),
        ({"timeout": "30"}, "timeout='30'"),
    ],
)
def test_bad_config_values_are_named(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(".", r"\.")):
        CircuitBreakerConfig(**options)


def test_record_outcomes_directly(clock):
    breaker = make(clock, failure_threshold=2)
    for outcome in (FAILURE, IGNORED, FAILURE):
        breaker.on_outcome(breaker.try_acquire(), outcome)
    assert breaker.state is State.OPEN
