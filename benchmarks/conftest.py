"""Benchmarks compare against a bare call and the peer breakers in the same run."""

from __future__ import annotations

import pytest

from otel_breaker import telemetry
from otel_breaker.config import set_settings
from otel_breaker.registry import default_registry


@pytest.fixture(autouse=True)
def fresh_state():
    set_settings(None)
    default_registry().clear(keep_counts=False)
    telemetry.TELEMETRY.reset(counts=True)
    yield
    telemetry.TELEMETRY.reset(counts=True)
