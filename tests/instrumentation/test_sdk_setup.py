"""The zero-code SDK set-up: the export rule, what it installs, and a dead collector.

The rule is :func:`otel_breaker.sdk_setup.plan_export` (doctor prints the same
plan). Programs run in subprocesses, as a user's agent would, with no ``OTEL_*``
variables leaking in from the test environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from otel_support import free_port

from otel_breaker import sdk_setup
from otel_breaker.sdk_exporters import CollectorWatch
from otel_breaker.sdk_setup import exit_budget, plan_export

# -- the rule ---------------------------------------------------------------------------------


def described(env: dict[str, str]) -> dict[str, list[str]]:
    plan = plan_export(env)
    return {signal.signal: [e.description for e in signal.exporters] for signal in plan.signals}


def test_nothing_asked_for_means_nothing_exported():
    plan = plan_export({})
    assert not plan.active and plan.problems == ()
    assert all("nothing asked for" in signal.reason for signal in plan.signals)


def test_one_exporter_variable_sets_up_that_signal_only():
    assert described({"OTEL_TRACES_EXPORTER": "console"}) == {"traces": ["console"], "metrics": [], "logs": []}


def test_an_endpoint_exports_every_signal_over_otlp_grpc_unless_the_protocol_says_http():
    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert described(endpoint) == {s: ["OTLP grpc to http://collector:4318"] for s in ("traces", "metrics", "logs")}
    http = described({**endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    assert http["traces"] == ["OTLP http/protobuf to http://collector:4318/v1/traces"]
    assert http["logs"] == ["OTLP http/protobuf to http://collector:4318/v1/logs"]
    mixed = described(
        {**endpoint, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf", "OTEL_LOGS_EXPORTER": "none"}
    )
    assert mixed == {
        "traces": ["OTLP grpc to http://collector:4318"],
        "metrics": ["OTLP http/protobuf to http://collector:4318/v1/metrics"],
        "logs": [],
    }


def test_a_signal_endpoint_exports_that_signal_only():
    env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317"}
    assert described(env) == {"traces": ["OTLP grpc to http://collector:4317"], "metrics": [], "logs": []}


def test_explicit_exporters_and_problems():
    env = {
        "OTEL_TRACES_EXPORTER": "console,otlp",
        "OTEL_METRICS_EXPORTER": "nosuch",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
    }
    plan = plan_export(env)
    assert [e.entry_point for e in plan.exporters("traces")] == ["console", "otlp_proto_grpc"]
    assert plan.exporters("metrics") == ()
    assert plan.problems == ("metrics not exported: OTEL_METRICS_EXPORTER=nosuch names no installed exporter 'nosuch' "
                             f"(available: {', '.join(sorted(sdk_setup._entry_point_names('metrics')))}); "
                             "pip install opentelemetry-exporter-nosuch",)  # fmt: skip
    bad = plan_export({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    assert not bad.active and "expected grpc or http/protobuf" in bad.problems[0]


def test_the_sdk_switch_and_the_demo():
    assert not plan_export({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}).active
    forced = plan_export({"OTEL_TRACES_EXPORTER": "none"}, force_otlp=True)
    assert [e.entry_point for s in forced.signals for e in s.exporters] == ["otlp_proto_grpc"] * 3


def test_the_exit_budget_respects_the_users_otlp_timeout():
    assert exit_budget({}) == sdk_setup.EXIT_BUDGET
    assert exit_budget({"OTEL_EXPORTER_OTLP_TIMEOUT": "1"}) == sdk_setup.EXIT_BUDGET
    assert exit_budget({"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "20"}) == 21.0
    assert exit_budget({"OTEL_EXPORTER_OTLP_TIMEOUT": "soon"}) == sdk_setup.EXIT_BUDGET


# -- the few private OpenTelemetry names we rely on --------------------------------------------


def test_the_private_opentelemetry_names_we_rely_on_still_exist():
    """Fails loudly when upstream moves the logs SDK or renames the proxy providers."""
    result = run(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from otel_breaker import sdk_exporters, sdk_setup

        logs = sdk_exporters.logs_sdk()
        assert logs.LoggerProvider and logs.BatchLogRecordProcessor and logs.success != logs.failure
        print(sdk_setup.providers_set_by_program())
        trace.set_tracer_provider(TracerProvider())
        logs.set_logger_provider(logs.LoggerProvider())
        print(sdk_setup.providers_set_by_program())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "['traces', 'logs']"]


# -- in a real process ----------------------------------------------------------------------------


def run(program: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(program)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
    )


# A program whose tool calls pass a framework adapter, started as the
# start-up hook starts it; it configures no OpenTelemetry itself.
AGENT = """
import sys, time
from otel_breaker import ToolCall
from otel_breaker.instrumentation.autostart import autostart
from otel_breaker.instrumentation.base import FrameworkAdapter

autostart()
adapter = FrameworkAdapter()
for i in range(50):
    adapter.run_sync(ToolCall("lookup"), lambda: "found", (), {})
"""


def test_nothing_asked_for_installs_nothing_and_starts_no_exporter():
    result = run(
        AGENT
        + """
from opentelemetry import trace
from otel_breaker import sdk_setup
print(sdk_setup.providers_set_by_program(), any(m.startswith("opentelemetry.exporter") for m in sys.modules))
""",
        OTEL_BREAKER_ENABLED="true",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] False"
    assert result.stderr == ""


def test_only_the_signal_asked_for_is_set_up_and_no_otlp_starts():
    result = run(
        AGENT
        + """
from otel_breaker import sdk_setup
print(sdk_setup.providers_set_by_program(), any(m.startswith("opentelemetry.exporter.otlp") for m in sys.modules))
""",
        OTEL_BREAKER_ENABLED="true",
        OTEL_TRACES_EXPORTER="console",
    )
    assert result.returncode == 0, result.stderr
    assert '"name": "execute_tool lookup"' in result.stdout  # the console exporter printed the spans at exit
    assert "['traces'] False" in result.stdout
    assert result.stderr == ""


def test_the_logs_exporter_sets_up_a_logger_provider():
    result = run(
        AGENT
        + """
from opentelemetry._logs import get_logger_provider
get_logger_provider().get_logger("check").emit(body="a log-based event")
""",
        OTEL_BREAKER_ENABLED="true",
        OTEL_LOGS_EXPORTER="console",
    )
    assert result.returncode == 0, result.stderr
    assert "a log-based event" in result.stdout


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_a_dead_collector_never_holds_the_program_and_is_one_warning(protocol):
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = run(
        AGENT + "print(time.monotonic(), flush=True)\n",
        OTEL_BREAKER_ENABLED="true",
        OTEL_EXPORTER_OTLP_ENDPOINT=closed,
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
    )
    exited = time.monotonic()
    assert result.returncode == 0, result.stderr
    ended = float(result.stdout.split()[-1])
    assert exited - ended < sdk_setup.EXIT_BUDGET + 3  # generous: the budget plus interpreter teardown
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("otel-breaker: OpenTelemetry export (OTLP ") and closed in lines[0]


def test_a_collector_found_dead_during_the_run_is_reported_once_and_not_waited_for_at_exit():
    closed = f"http://127.0.0.1:{free_port()}"
    result = run(
        AGENT
        + """
import logging
deadline = time.monotonic() + 60
class Seen(logging.Handler):
    lines = []
    def emit(self, record):
        Seen.lines.append(record.getMessage())
logging.getLogger("otel_breaker").addHandler(Seen())
while not Seen.lines and time.monotonic() < deadline:
    adapter.run_sync(ToolCall("lookup"), lambda: "found", (), {})
    time.sleep(0.05)
for i in range(200):  # more batches while it is down: no more lines, no retries
    adapter.run_sync(ToolCall("lookup"), lambda: "found", (), {})
    if i % 50 == 0:
        time.sleep(0.1)
print(Seen.lines[0])
print(len(Seen.lines), time.monotonic(), flush=True)
""",
        OTEL_BREAKER_ENABLED="true",
        OTEL_EXPORTER_OTLP_ENDPOINT=closed,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_TIMEOUT="1",
        OTEL_BSP_SCHEDULE_DELAY="50",
    )
    exited = time.monotonic()
    assert result.returncode == 0, result.stderr
    warning, counts = result.stdout.splitlines()
    lines, ended = counts.split()
    assert lines == "1"
    assert "OpenTelemetry export failed" in warning and "is the collector reachable?" in warning
    assert exited - float(ended) < 3  # known to be down: not waited for again
    assert result.stderr == ""  # none of the exporter's own retry messages


def test_the_watch_pauses_after_a_failure_and_reports_recovery(caplog):
    now = [0.0]
    watch = CollectorWatch(clock=lambda: now[0], pause=30)
    assert not watch.paused()
    watch.failed("OTLP grpc to http://c:4317")
    watch.failed("OTLP grpc to http://c:4317")
    assert watch.paused() and len(caplog.records) == 1
    now[0] = 31
    assert not watch.paused()
    watch.succeeded()
    assert "works again" in caplog.records[-1].getMessage()
