"""Zero-code without a launcher: the SDK is set up from the standard OTEL_* variables
when the program configured none, and left alone when it did."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from otel_support import Receiver

# A program that imports a supported framework (which starts otel-breaker) and
# makes a tool call through a framework adapter (what an instrumented framework
# does); it configures no OpenTelemetry itself. The "framework" is an empty
# package on PYTHONPATH: only its import matters here.
PROGRAM = textwrap.dedent(
    """
    import langchain_core
    from otel_breaker import ToolCall
    from otel_breaker.instrumentation.base import FrameworkAdapter

    print(FrameworkAdapter().run_sync(ToolCall("lookup"), lambda: "found", (), {}))
    """
)


@pytest.fixture
def receiver(tmp_path):
    receiver = Receiver(tmp_path)
    receiver.start()
    yield receiver
    receiver.stop()


FAKE_FRAMEWORK = pathlib.Path(__file__).parent / "fake_framework"


def run(program: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment["PYTHONPATH"] = str(FAKE_FRAMEWORK)
    environment.update(env)
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=environment, timeout=120)


def test_the_sdk_is_set_up_from_otel_variables_at_the_first_tool_call(receiver):
    result = run(
        PROGRAM,
        OTEL_BREAKER_ENABLED="true",
        OTEL_SERVICE_NAME="agent-under-test",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.http_port}",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "found"
    text = receiver.wait_for("execute_tool lookup", "Name: otel_breaker.calls")
    assert "agent-under-test" in text


def test_a_program_with_its_own_sdk_keeps_it(receiver):
    program = (
        textwrap.dedent(
            """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        """
        )
        + PROGRAM
        + "print([s.name for s in exporter.get_finished_spans()])\n"
    )
    result = run(
        program,
        OTEL_BREAKER_ENABLED="true",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.http_port}",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["found", "['execute_tool lookup']"]
    assert "execute_tool lookup" not in receiver.text()  # its provider was used, not one from the environment


def test_without_the_switch_nothing_is_set_up(receiver):
    result = run(PROGRAM, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.http_port}")
    assert result.returncode == 0, result.stderr
    assert "execute_tool" not in receiver.text()
