"""Fixtures shared by the core suite."""

from __future__ import annotations

import gc

import pytest

from otel_breaker import loops, run_budget, telemetry
from otel_breaker.config import set_settings
from otel_breaker.registry import default_registry


class FakeClock:
    """A monotonic clock the test moves by hand: no sleeping for cooldowns."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def otel():
    """A real SDK with in-memory span exporter and metric reader."""
    from otel_support import Otel

    yield Otel()
    telemetry.TELEMETRY.reset(counts=True)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def registry_clock():
    """A fake clock for every breaker the registry creates in this test
    (the ones framework adapters and ``@guard`` use): advance it past a cooldown."""
    fake = FakeClock()
    default_registry().use_clock(fake)
    yield fake
    default_registry().use_clock(None)


@pytest.fixture(autouse=True)
def fresh_state():
    """Each test starts with default settings, no registered breakers and global telemetry."""
    set_settings(None)
    default_registry().clear(keep_counts=False)
    telemetry.TELEMETRY.reset(counts=True)
    loops.reset()
    run_budget.reset()
    gc.collect()  # breakers of earlier tests must not show up in this test's metrics
    yield
    default_registry().clear(keep_counts=False)
    set_settings(None)
    telemetry.TELEMETRY.reset(counts=True)
    loops.reset()
