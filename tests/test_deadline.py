"""Async timeouts: our cancellation becomes a timeout failure, anyone else's stays a cancellation."""

from __future__ import annotations

import asyncio

import pytest

from otel_breaker import CircuitBreaker, CircuitBreakerConfig, State, ToolTimeoutError


def breaker(timeout: float, **options) -> CircuitBreaker:
    return CircuitBreaker("slow", CircuitBreakerConfig(timeout=timeout, failure_threshold=1, **options))


async def test_external_cancellation_is_not_a_timeout_and_not_a_failure():
    guarded = breaker(60)
    started = asyncio.Event()

    async def hang():
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(guarded.acall(hang))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert guarded.state is State.CLOSED and guarded.stats.ignored_count == 1


async def test_the_outer_call_times_out_when_the_inner_one_is_still_within_its_own():
    outer, inner = breaker(0.05), breaker(60)

    async def hang():
        await asyncio.Event().wait()

    with pytest.raises(ToolTimeoutError):
        await outer.acall(inner.acall, hang)
    assert outer.state is State.OPEN
    assert inner.state is State.CLOSED and inner.stats.ignored_count == 1
    assert asyncio.current_task().cancelling() == 0


async def test_a_call_that_swallows_the_cancellation_is_still_a_timeout_failure():
    guarded = breaker(0.05)

    async def stubborn():
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            return "finished anyway"

    assert await guarded.acall(stubborn) == "finished anyway"
    assert guarded.state is State.OPEN
    assert asyncio.current_task().cancelling() == 0  # our request was taken back


async def test_many_concurrent_calls_each_get_their_own_deadline():
    # 1 s: the calls that finish must do so within it on a busy machine, 200 tasks at once
    guarded = CircuitBreaker("mixed", CircuitBreakerConfig(timeout=1.0, failure_threshold=10**6))

    async def sometimes_hang(i):
        if i % 2:
            await asyncio.Event().wait()
        await asyncio.sleep(0)
        return i

    results = await asyncio.gather(*(guarded.acall(sometimes_hang, i) for i in range(200)), return_exceptions=True)
    assert [r for r in results if not isinstance(r, Exception)] == list(range(0, 200, 2))
    assert sum(isinstance(r, ToolTimeoutError) for r in results) == 100
    assert guarded.stats.failure_count == 100 and guarded.stats.success_count == 100


def test_deadlines_work_across_event_loops():
    guarded = breaker(1.0)  # a quick call must finish well within it, however busy the machine

    async def quick():
        return 1

    for _ in range(3):
        assert asyncio.run(guarded.acall(quick)) == 1


def test_no_asyncio_loop_means_no_watch():
    """Outside asyncio (trio, or no loop at all) the cheap watch steps aside; the
    guard then applies the timeout with an anyio cancel scope."""
    from otel_breaker import deadline

    assert deadline.start(1.0) is None


async def test_a_failure_in_our_timeout_bookkeeping_never_reaches_the_caller(monkeypatch, recwarn):
    """The tool's coroutine is awaited and its result returned, never left un-awaited."""
    import gc
    import importlib

    deadline = importlib.import_module("otel_breaker.deadline")
    loglines = importlib.import_module("otel_breaker.loglines")

    def broken(timeout):
        raise RuntimeError("bookkeeping bug")

    monkeypatch.setattr(deadline, "start", broken)
    monkeypatch.setattr(loglines, "_bookkeeping_warned", False)  # logged once per process: restore after
    breaker = CircuitBreaker("tool", CircuitBreakerConfig(timeout=5.0))
    ran = []

    async def tool():
        ran.append(1)
        return "ok"

    assert await breaker.acall(tool) == "ok"
    gc.collect()
    assert ran == [1]
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert breaker.state is State.CLOSED


def test_timeouts_on_trio():
    trio = pytest.importorskip("trio")
    breaker = CircuitBreaker("slow", CircuitBreakerConfig(timeout=1.0))  # generous for the fast call

    async def slow():
        await trio.sleep(5)

    async def fast():
        await trio.sleep(0)
        return "ok"

    async def main():
        with trio.fail_after(4):  # proves it does not hang
            assert await breaker.acall(fast) == "ok"
            with pytest.raises(ToolTimeoutError):
                await breaker.acall(slow)

    trio.run(main)


def test_timeouts_on_uvloop():
    uvloop = pytest.importorskip("uvloop")
    breaker = CircuitBreaker("slow", CircuitBreakerConfig(timeout=1.0))  # generous for the fast call

    async def main():
        with pytest.raises(ToolTimeoutError):
            await breaker.acall(asyncio.sleep, 5)
        assert await breaker.acall(asyncio.sleep, 0, "ok") == "ok"

    uvloop.run(main())
