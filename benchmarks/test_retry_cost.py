"""Cost of retries below the model on a healthy call: none.

A successful call pays nothing for retries being on: the retry step is reached only
after a failure, and the budget counts calls from the breaker's own counters, so the
quick route of ``call_path.run`` stays the route of a plain breaker with retries on.

* the group ``retries: one healthy call``: ``breaker.call``, ``@guard`` and an async
  ``acall`` with retries off and on, next to each other (compare ``min``);
* ``test_retries_on_cost_no_more_than_off``: the ratio of the two in the same run, on
  interleaved rounds, within noise, for ``breaker.call``, ``@guard`` and 100 async
  ``acall`` (printed; docs/performance.md quotes it).

Run: ``nox -s benchmarks -- benchmarks/test_retry_cost.py``.
"""

from __future__ import annotations

import asyncio
import timeit
from collections.abc import Callable

import pytest

from otel_breaker import CircuitBreaker, guard
from otel_breaker.breaker import CircuitBreakerConfig

RETRIES_ON = CircuitBreakerConfig(retry="transient", effects="read_only")
#: Interleaved rounds of the ratio test, and calls per round: many short rounds, so the
#: fastest of each finds a moment the (busy, shared) machine left alone.
ROUNDS = 40
CALLS = 5_000
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


def _ratio(off: Callable[[], object], on: Callable[[], object], calls: int = CALLS) -> float:
    """min(on) / min(off) over interleaved rounds, each pair in turn order (a busy moment
    of the machine costs both, and neither always runs first)."""
    timings: dict[str, list[float]] = {"off": [], "on": []}
    for i in range(ROUNDS):
        order = (("off", off), ("on", on)) if i % 2 else (("on", on), ("off", off))
        for name, fn in order:
            timings[name].append(timeit.timeit(fn, number=calls))
    return min(timings["on"]) / min(timings["off"])


def test_retries_on_cost_no_more_than_off(capsys):
    off, on = CircuitBreaker("off"), CircuitBreaker("on", RETRIES_ON)
    assert off.plain and on.plain
    guarded_off, guarded_on = guard("guarded_off")(tool), guard("guarded_on", config=RETRIES_ON)(tool)
    ratios = {
        "breaker.call": _ratio(lambda: off.call(tool), lambda: on.call(tool)),
        "@guard": _ratio(guarded_off, guarded_on),
        "100 async acall": _ratio(
            lambda: _async_round(CircuitBreaker("aoff")), lambda: _async_round(CircuitBreaker("aon", RETRIES_ON)), 5
        ),
    }
    with capsys.disabled():
        shown = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items())
        print(f"\n[retries] a healthy call with retries on costs, against off: {shown}")
    for name, ratio in ratios.items():
        assert ratio <= NOISE, f"{name}: a healthy call costs {ratio:.2f}x with retries on"
