"""Threads and tasks racing through one breaker: exact counts, exact probe limits."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest

from otel_breaker import CircuitBreaker, CircuitBreakerConfig, State


class Down(Exception):
    pass


def test_counts_add_up_exactly_across_16_threads():
    # failure_threshold high enough that the breaker never opens: every call runs
    breaker = CircuitBreaker("t", CircuitBreakerConfig(failure_threshold=10**9, timeout=None))
    per_thread = 20_000
    tallies = [[0, 0] for _ in range(16)]

    def worker(index: int) -> None:
        rng = random.Random(index)
        tally = tallies[index]

        def fail():
            raise Down

        for _ in range(per_thread):
            if rng.random() < 0.3:
                tally[1] += 1
                with pytest.raises(Down):
                    breaker.call(fail)
            else:
                tally[0] += 1
                breaker.call(int)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = breaker.stats
    assert stats.total_requests == 16 * per_thread
    assert stats.success_count == sum(t[0] for t in tallies)
    assert stats.failure_count == sum(t[1] for t in tallies)


def test_counts_are_exact_while_the_breaker_opens_and_rejects():
    breaker = CircuitBreaker("t", CircuitBreakerConfig(failure_threshold=50, recovery_timeout=3600, timeout=None))

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(5_000):
            try:
                breaker.call(lambda: (_ for _ in ()).throw(Down()) if rng.random() < 0.5 else 1)
            except Down:
                pass

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = breaker.stats
    assert stats.total_requests == 16 * 5_000
    assert stats.success_count + stats.failure_count + stats.rejected_requests == stats.total_requests


@pytest.mark.parametrize("max_probes", [1, 3])
def test_exactly_half_open_max_calls_probes_among_50_threads(max_probes):
    now = [0.0]
    config = CircuitBreakerConfig(failure_threshold=1, recovery_timeout=10, half_open_max_calls=max_probes)
    breaker = CircuitBreaker("t", config, clock=lambda: now[0])
    with pytest.raises(Down):
        breaker.call(lambda: (_ for _ in ()).throw(Down()))
    now[0] = 10
    ran = []
    gate = threading.Barrier(50)
    release = threading.Event()

    def probe():
        ran.append(1)
        release.wait(5)
        return "ok"

    def worker():
        gate.wait()
        breaker.call(probe)

    threads = [threading.Thread(target=worker) for _ in range(50)]
    for thread in threads:
        thread.start()
    for _ in range(1000):
        if breaker.stats.rejected_requests + len(ran) >= 50:
            break
        threading.Event().wait(0.005)
    release.set()
    for thread in threads:
        thread.join()
    assert len(ran) == max_probes
    assert breaker.stats.rejected_requests == 50 - max_probes


async def test_exactly_one_probe_among_1000_tasks():
    now = [0.0]
    breaker = CircuitBreaker(
        "t", CircuitBreakerConfig(failure_threshold=1, recovery_timeout=10, success_threshold=1), clock=lambda: now[0]
    )

    async def fail():
        raise Down

    with pytest.raises(Down):
        await breaker.acall(fail)
    now[0] = 10
    ran = []
    release = asyncio.Event()

    async def probe():
        ran.append(1)
        await release.wait()
        return "ok"

    tasks = [asyncio.create_task(breaker.acall(probe)) for _ in range(1000)]
    await asyncio.sleep(0)
    release.set()
    results = await asyncio.gather(*tasks)
    assert len(ran) == 1
    assert sum(1 for r in results if r == "ok") == 1
    assert sum(1 for r in results if isinstance(r, dict) and r["circuit_open"]) == 999
    assert breaker.state is State.CLOSED


async def test_async_counts_exact_over_1000_tasks():
    breaker = CircuitBreaker("t", CircuitBreakerConfig(failure_threshold=10**9))

    async def maybe_fail(i):
        await asyncio.sleep(0)
        if i % 3 == 0:
            raise Down
        return i

    results = await asyncio.gather(*(breaker.acall(maybe_fail, i) for i in range(1000)), return_exceptions=True)
    stats = breaker.stats
    assert stats.failure_count == sum(isinstance(r, Down) for r in results) == 334
    assert stats.success_count == 666


class _LockWithHook:
    """The breaker's lock, running ``hook`` once just before it is first taken:
    puts another thread's transition between an unlocked read and the lock."""

    def __init__(self, lock, hook) -> None:
        self._lock = lock
        self._hook = hook

    def __enter__(self):
        hook, self._hook = self._hook, None
        if hook is not None:
            hook()
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)


def _closing_between_read_and_lock(breaker: CircuitBreaker, probe) -> None:
    """The next slow-path admission reads HALF_OPEN without the lock; before it
    gets the lock, the probe in flight succeeds and closes the breaker."""
    real = breaker._lock

    def close() -> None:
        breaker._lock = real
        breaker.on_outcome(probe, 0)  # SUCCESS

    breaker._lock = _LockWithHook(real, close)


def test_admission_under_the_lock_decides_from_the_state_found_there(clock):
    breaker = CircuitBreaker(
        "raced", CircuitBreakerConfig(failure_threshold=1, success_threshold=1, recovery_timeout=10), clock=clock
    )
    breaker.force_open(10)
    clock.advance(11)
    probe = breaker.try_acquire()  # the half-open probe
    assert isinstance(probe, tuple) and breaker.state is State.HALF_OPEN
    _closing_between_read_and_lock(breaker, probe)
    permit = breaker.try_acquire()  # read HALF_OPEN unlocked; CLOSED once it holds the lock
    assert breaker.state is State.CLOSED
    assert permit == breaker.generation  # a plain closed-state permit, not a probe lease or a rejection
    breaker.on_outcome(permit, 1)  # FAILURE: its outcome counts (it used to be dropped)
    assert breaker.state is State.OPEN
