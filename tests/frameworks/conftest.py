"""Shared fixtures for the framework suites: a real SDK with in-memory exporters
(``otel``, from tests/otel_support.py), an instrumentor per test, a real OTLP
receiver for the scripts run in a subprocess (``receiver``), and quiet logs for the
suites whose servers log each failing call (``quiet_logs``)."""

from __future__ import annotations

import logging

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


@pytest.fixture
def quiet_logs():
    """Logging off up to ERROR for one test: MCP servers and clients in the test's process log
    a line or a traceback per failing call, which the tests make on purpose. A module takes it
    with ``pytestmark = pytest.mark.usefixtures("quiet_logs")``."""
    logging.disable(logging.ERROR)
    yield
    logging.disable(logging.NOTSET)
