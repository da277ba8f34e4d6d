"""Cost of a new session's breaker as sessions accumulate (``OTEL_BREAKER_SCOPE=session``).

Each row creates breakers for new sessions while ``live`` sessions already hold
one: the cost per new session must not grow with them. Compare rows within a run.
"""

from __future__ import annotations

import itertools

import pytest

from otel_breaker.config import load_settings
from otel_breaker.registry import BreakerRegistry
from otel_breaker.toolcall import ToolCall


class _Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def _registry(live: int, max_breakers: int) -> tuple[BreakerRegistry, itertools.count]:
    registry = BreakerRegistry(
        settings=load_settings({"OTEL_BREAKER_SCOPE": "session"}), clock=_Clock(), max_breakers=max_breakers
    )
    for index in range(live):
        registry.breaker_for(ToolCall("search", session_id=f"live-{index}")).try_acquire()  # in flight: not idle
    return registry, itertools.count()


@pytest.mark.benchmark(group="session scope: one new session", min_rounds=2000, warmup=False)
@pytest.mark.parametrize(
    ("live", "max_breakers"),
    [(0, 1_000_000), (100_000, 1_000_000), (100_000, 10_000)],
    ids=["0 live", "100k live", "100k past a 10k cap"],
)
def test_new_session_breaker(benchmark, live, max_breakers):
    registry, ids = _registry(live, max_breakers)

    def new_session() -> None:
        registry.breaker_for(ToolCall("search", session_id=f"new-{next(ids)}"))

    benchmark.pedantic(new_session, rounds=5000, iterations=1)
    assert len(registry) <= max_breakers
