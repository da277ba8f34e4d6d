"""Every signal stands alone: one that cannot be set up costs that signal only.

Programs run in subprocesses, as a user's agent would, with a real OTLP
receiver on 127.0.0.1 and a real Prometheus exporter whose port is taken.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import textwrap

import pytest
from otel_support import Receiver, free_port

FAKE_FRAMEWORK = pathlib.Path(__file__).parent / "fake_framework"

PROGRAM = textwrap.dedent(
    """
    import langchain_core
    from opentelemetry._logs import get_logger_provider
    from otel_breaker import ToolCall
    from otel_breaker.instrumentation.base import FrameworkAdapter

    print(FrameworkAdapter().run_sync(ToolCall("lookup"), lambda: "found", (), {}))
    get_logger_provider().get_logger("check").emit(body="a log record of the program")
    """
)


@pytest.fixture
def receiver(tmp_path):
    receiver = Receiver(tmp_path)
    receiver.start()
    yield receiver
    receiver.stop()


@pytest.fixture
def taken_port():
    """A port something else already listens on."""
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run(receiver: Receiver, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment.update(
        PYTHONPATH=str(FAKE_FRAMEWORK),
        OTEL_BREAKER_ENABLED="true",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.http_port}",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_LOGS_EXPORTER="otlp",
    )
    environment.update(env)
    return subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=environment, timeout=120)


def warnings(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def test_the_prometheus_port_taken_costs_metrics_only(receiver, taken_port):
    result = run(
        receiver,
        OTEL_METRICS_EXPORTER="prometheus",
        OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
        OTEL_EXPORTER_PROMETHEUS_PORT=str(taken_port),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "found"
    receiver.wait_for("execute_tool lookup", "a log record of the program")
    (line,) = warnings(result)
    assert line.startswith("otel-breaker: metrics not exported (prometheus)")
    assert f"127.0.0.1:{taken_port}" in line and "OTEL_EXPORTER_PROMETHEUS_PORT" in line
    assert "Traceback" not in result.stderr


def test_a_clash_with_the_status_endpoint_is_named(receiver):
    port = free_port()
    result = run(
        receiver,
        OTEL_METRICS_EXPORTER="prometheus",
        OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
        OTEL_EXPORTER_PROMETHEUS_PORT=str(port),
        OTEL_BREAKER_STATUS_ADDR=f"127.0.0.1:{port}",
    )
    assert result.returncode == 0, result.stderr
    receiver.wait_for("execute_tool lookup", "a log record of the program")
    clash = [line for line in warnings(result) if "metrics not exported" in line]
    assert len(clash) == 1, result.stderr
    assert f"OTEL_BREAKER_STATUS_ADDR=127.0.0.1:{port}" in clash[0]


def test_a_missing_exporter_package_costs_its_signal_only(receiver):
    result = run(receiver, OTEL_TRACES_EXPORTER="zipkin_json", OTEL_METRICS_EXPORTER="none")
    assert result.returncode == 0, result.stderr
    receiver.wait_for("a log record of the program")
    (line,) = warnings(result)
    assert line.startswith("otel-breaker: traces not exported") and "zipkin_json" in line
