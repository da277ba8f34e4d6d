"""Shared fixtures for the framework suites: a real SDK with in-memory exporters
(``otel``, from tests/otel_support.py) and an instrumentor per test."""

from __future__ import annotations

import pytest

from otel_breaker.instrumentation import BreakerInstrumentor


@pytest.fixture
def instrument():
    """``instrument("langchain")`` patches one framework for this test only."""
    instrumentor = BreakerInstrumentor()

    def _instrument(*frameworks: str):
        instrumentor.instrument(frameworks=list(frameworks))
        return instrumentor

    yield _instrument
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
