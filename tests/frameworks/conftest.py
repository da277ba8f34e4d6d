"""Shared fixtures for the framework suites: a real SDK with in-memory exporters
(``otel``, from tests/otel_support.py), an instrumentor per test, and a real OTLP
receiver for the scripts run in a subprocess (``receiver``)."""

from __future__ import annotations

import pytest

from otel_breaker.instrumentation import BreakerInstrumentor


@pytest.fixture
def otel():
    """A real SDK with in-memory exporters; the framework's own spans (sent to the
    global tracer provider, installed once per process as a user's SDK would be)
    land in the same exporter as ours, so a test sees every span of its run."""
    from contract import _global_forwarder
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from otel_support import Otel

    from otel_breaker import telemetry

    otel = Otel()
    forwarder = _global_forwarder()
    target = SimpleSpanProcessor(otel.spans)
    if forwarder is not None:
        forwarder.targets.append(target)
    yield otel
    if forwarder is not None and target in forwarder.targets:
        forwarder.targets.remove(target)
    telemetry.TELEMETRY.reset(counts=True)


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


@pytest.fixture
def receiver():
    """A real OTLP receiver on 127.0.0.1 (gRPC and HTTP) for a script's exports."""
    from otlp_receiver import OtlpReceiver

    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()
