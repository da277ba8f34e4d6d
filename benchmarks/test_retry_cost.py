"""Cost of retries below the model on a healthy call: none.

A successful call pays nothing for retries being on: the retry step is reached only
after a failure, and the budget counts calls from the breaker's own counters, so the
quick route of ``call_path.run`` stays the route of a plain breaker with retries on.

* the group ``retries: one healthy call``: ``breaker.call``, ``@guard`` and an async
  ``acall`` with retries off and on, next to each other (compare ``min``);
* ``test_retries_on_cost_no_more_than_off``: the ratio of the two in the same run, on
  interleaved rounds, within noise.

Run: ``nox -s benchmarks -- benchmarks/test_retry_cost.py``.
"""

from __future__ import annotations

import asyncio
import timeit

import pytest

from otel_breaker import CircuitBreaker, guard
from otel_breaker.breaker import CircuitBreakerConfig

RETRIES_ON = CircuitBreakerConfig(retry="transient", effects="read_only")
#: Interleaved rounds of the ratio test, and calls per round.
ROUNDS = 15
CALLS = 20_000
#: A healthy call with retries on may cost at most this much more than off: noise only.
NOISE = 1.2


def tool() -> int:
    return 1


async def atool() -> int:
    return 1


@pytest.mark.benchmark(group="retries: one healthy call", min_rounds=20, warmup=True)
def test_breaker_call_retries_off(benchmark):
    benchmark(CircuitBreaker("tool").call, tool)


@pytest.mark.benchmark(group="retries: one healthy call", min_rounds=20, warmup=True)
def test_breaker_call_retries_on(benchmark):
    benchmark(CircuitBreaker("tool", RETRIES_ON).call, tool)


@pytest.mark.benchmark(group="retries: one healthy call", min_rounds=20, warmup=True)
def test_guard_retries_off(benchmark):
    benchmark(guard("tool_off")(tool))


@pytest.mark.benchmark(group="retries: one healthy call", min_rounds=20, warmup=True)
def test_guard_retries_on(benchmark):
    benchmark(guard("tool_on", config=RETRIES_ON)(tool))


def _async_round(breaker: CircuitBreaker) -> None:
    async def many() -> None:
        for _ in range(100):
            await breaker.acall(atool)

    asyncio.run(many())


@pytest.mark.benchmark(group="retries: 100 healthy async calls", min_rounds=20, warmup=True)
def test_async_retries_off(benchmark):
    benchmark(_async_round, CircuitBreaker("tool"))


@pytest.mark.benchmark(group="retries: 100 healthy async calls", min_rounds=20, warmup=True)
def test_async_retries_on(benchmark):
    benchmark(_async_round, CircuitBreaker("tool", RETRIES_ON))


def test_retries_on_cost_no_more_than_off():
    off, on = CircuitBreaker("off"), CircuitBreaker("on", RETRIES_ON)
    assert off.plain and on.plain
    timings: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(ROUNDS):  # interleaved: a busy moment of the machine costs both
        timings["off"].append(timeit.timeit(lambda: off.call(tool), number=CALLS))
        timings["on"].append(timeit.timeit(lambda: on.call(tool), number=CALLS))
    ratio = min(timings["on"]) / min(timings["off"])
    assert ratio <= NOISE, f"a healthy call costs {ratio:.2f}x with retries on"
