"""Cost of a guarded call: ours against a bare call and the peer breakers.

Run: ``nox -s benchmarks`` (or ``pytest benchmarks``). Compare ``min``/``median``
columns within one run; the README reports the ratios.
"""

from __future__ import annotations

import asyncio

import pytest

from otel_breaker import CircuitBreaker, CircuitBreakerConfig, guard

pytestmark = pytest.mark.benchmark(group="closed: one healthy sync call", min_rounds=20, warmup=True)


def tool() -> int:
    return 1


def test_bare_call(benchmark):
    benchmark(tool)


def test_otel_breaker_call(benchmark):
    breaker = CircuitBreaker("tool")
    benchmark(breaker.call, tool)


def test_otel_breaker_decorated(benchmark):
    benchmark(CircuitBreaker("tool")(tool))


def test_otel_breaker_guard_registry(benchmark):
    """``@guard``: the registry lookup (scopes, sessions) on every call."""
    benchmark(guard("tool")(tool))


def test_pybreaker(benchmark):
    pybreaker = pytest.importorskip("pybreaker")
    breaker = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=60)
    benchmark(breaker.call, tool)


def test_circuitbreaker(benchmark):
    circuitbreaker = pytest.importorskip("circuitbreaker")
    benchmark(circuitbreaker.CircuitBreaker(failure_threshold=5, recovery_timeout=60)(tool))


def test_purgatory(benchmark):
    purgatory = pytest.importorskip("purgatory")
    factory = purgatory.SyncCircuitBreakerFactory(default_threshold=5, default_ttl=60)
    benchmark(factory("tool")(tool))


def test_aiobreaker_sync(benchmark):
    aiobreaker = pytest.importorskip("aiobreaker")
    breaker = aiobreaker.CircuitBreaker(fail_max=5)
    benchmark(breaker.call, tool)


@pytest.mark.benchmark(group="open: one rejected call")
def test_otel_breaker_rejection(benchmark):
    breaker = CircuitBreaker("tool", CircuitBreakerConfig())
    breaker.force_open()
    result = benchmark(breaker.call, tool)
    assert result["circuit_open"] is True


@pytest.mark.benchmark(group="open: one rejected call")
def test_pybreaker_rejection(benchmark):
    pybreaker = pytest.importorskip("pybreaker")
    breaker = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=3600)
    breaker.open()

    def rejected():
        try:
            breaker.call(tool)
        except pybreaker.CircuitBreakerError:
            return None

    benchmark(rejected)


@pytest.mark.benchmark(group="open: one rejected call")
def test_otel_breaker_guard_rejection(benchmark):
    """``@guard``'s rejection: the registry's breaker kept, open."""
    from otel_breaker import get_circuit_breaker

    guarded = guard("rejected_tool")(tool)
    guarded()  # the registry's breaker is now kept by the wrapper
    get_circuit_breaker("rejected_tool").force_open()
    result = benchmark(guarded)
    assert result["circuit_open"] is True


@pytest.mark.benchmark(group="open: one rejected call")
def test_circuitbreaker_rejection(benchmark):
    circuitbreaker = pytest.importorskip("circuitbreaker")
    breaker = circuitbreaker.CircuitBreaker(failure_threshold=1, recovery_timeout=3600)
    decorated = breaker(tool)

    def fail():
        raise RuntimeError

    try:
        breaker(fail)()
    except RuntimeError:
        pass

    def rejected():
        try:
            decorated()
        except circuitbreaker.CircuitBreakerError:
            return None

    benchmark(rejected)


def _run_many(coroutine_function, count: int = 1000):
    async def many():
        for _ in range(count):
            await coroutine_function()

    return lambda: asyncio.run(many())


async def atool() -> int:
    return 1


@pytest.mark.benchmark(group="async: 1000 healthy calls in one event loop")
def test_async_bare(benchmark):
    benchmark(_run_many(atool))


@pytest.mark.benchmark(group="async: 1000 healthy calls in one event loop")
def test_async_otel_breaker(benchmark):
    breaker = CircuitBreaker("tool", CircuitBreakerConfig(timeout=None))
    benchmark(_run_many(lambda: breaker.acall(atool)))


@pytest.mark.benchmark(group="async: 1000 healthy calls in one event loop")
def test_async_otel_breaker_guard(benchmark):
    """``@guard`` on a coroutine function: the registry's breaker kept, as for sync ones."""
    benchmark(_run_many(guard("atool")(atool)))


@pytest.mark.benchmark(group="async: 1000 healthy calls in one event loop")
def test_async_otel_breaker_with_timeout(benchmark):
    """A 30 s timeout (asked for; there is none by default) watches every call for hung coroutines."""
    breaker = CircuitBreaker("tool", CircuitBreakerConfig(timeout=30))
    benchmark(_run_many(lambda: breaker.acall(atool)))


@pytest.mark.benchmark(group="async: 1000 healthy calls in one event loop")
def test_async_aiobreaker(benchmark):
    aiobreaker = pytest.importorskip("aiobreaker")
    breaker = aiobreaker.CircuitBreaker(fail_max=5)
    benchmark(_run_many(lambda: breaker.call_async(atool)))


@pytest.mark.benchmark(group="async: 1000 healthy calls in one event loop")
def test_async_purgatory(benchmark):
    purgatory = pytest.importorskip("purgatory")
    factory = purgatory.AsyncCircuitBreakerFactory(default_threshold=5, default_ttl=60)

    async def guarded():
        async with await factory.get_breaker("tool"):
            return await atool()

    benchmark(_run_many(guarded))


@pytest.mark.benchmark(group="start-up: the .pth line with OTEL_BREAKER_ENABLED unset")
def test_startup_hook_when_disabled(benchmark, monkeypatch):
    from pathlib import Path

    monkeypatch.delenv("OTEL_BREAKER_ENABLED", raising=False)
    line = (Path(__file__).parent.parent / "otel_breaker.pth").read_text()
    code = compile(line, "otel_breaker.pth", "exec")
    benchmark(exec, code, {})
