"""``otel-breaker doctor``: configuration with sources, frameworks and patch points, exporters."""

from __future__ import annotations

import re

import pytest
from cli_helpers import clean_env, run_cli

from otel_breaker.instrumentation import ADAPTERS


def test_doctor_on_a_clean_environment():
    result = run_cli("doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.match(r"otel-breaker \S+ on Python 3\.\d+\.\d+ \(", out)
    assert re.search(r"^  OTEL_BREAKER_FAILURE_THRESHOLD\s+5\s+default$", out, re.M)
    assert re.search(r"^  OTEL_BREAKER_STATUS_IN_PROMPT\s+False\s+default$", out, re.M)
    for name in ADAPTERS:  # every framework is reported: installed, not installed or adapter not available
        assert re.search(rf"^  {name}\s+(.+)$", out.split("Frameworks")[1], re.M), name
    assert re.search(r"^  opentelemetry-sdk\s+\d+\.\d+", out, re.M)
    assert "instrumentor entry point otel_breaker: registered" in out
    assert re.search(r"^    OTEL_EXPORTER_OTLP_ENDPOINT\s+\(not set\)$", out, re.M)
    assert "traces: OTLP grpc to http://localhost:4317 (default)" in out
    assert out.rstrip().endswith("No problems found.")
    assert result.stderr == ""


def test_doctor_names_the_source_of_each_value():
    env = clean_env(
        OTEL_BREAKER_FAILURE_THRESHOLD="3",
        OTEL_BREAKER_FALLBACKS="web_search=backup_search",
        OTEL_BREAKER_STATUS_IN_PROMPT="true",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4318",
        OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer secret-token",
    )
    out = run_cli("doctor", env=env).stdout
    assert re.search(r"^  OTEL_BREAKER_FAILURE_THRESHOLD\s+3\s+env$", out, re.M)
    assert re.search(r"^  OTEL_BREAKER_RECOVERY_TIMEOUT\s+60\.0\s+default$", out, re.M)
    assert re.search(r"^  OTEL_BREAKER_FALLBACKS\s+\{'web_search': \('backup_search',\)\}\s+env$", out, re.M)
    assert re.search(r"^  OTEL_BREAKER_STATUS_IN_PROMPT\s+True\s+env$", out, re.M)
    assert "traces: OTLP http/protobuf to http://collector:4318" in out
    assert "secret-token" not in out
    assert re.search(r"^    OTEL_EXPORTER_OTLP_HEADERS\s+\*\*\*$", out, re.M)


def test_doctor_reports_every_problem_and_exits_1():
    env = clean_env(
        OTEL_BREAKER_FAILURE_THRESHOLD="zero",
        OTEL_BREAKER_FALLBACKS="web_search",
        OTEL_BREAKER_FAILURE_TRESHOLD="3",
        OTEL_TRACES_EXPORTER="nosuchexporter",
    )
    result = run_cli("doctor", env=env)
    assert result.returncode == 1
    out = result.stdout
    assert "PROBLEM: OTEL_BREAKER_FAILURE_THRESHOLD='zero': expected a whole number >= 1" in out
    assert "PROBLEM: OTEL_BREAKER_FALLBACKS='web_search'" in out
    assert "OTEL_BREAKER_FAILURE_TRESHOLD is not an otel-breaker setting (misspelt?)" in out
    assert "OTEL_TRACES_EXPORTER=nosuchexporter: no such exporter installed" in out
    assert "4 problem(s) found:" in out
    # the lenient loader's warnings are not repeated on stderr: each problem is in the report
    assert result.stderr == ""


def test_doctor_flags_a_requested_framework_that_cannot_be_enabled():
    from otel_breaker.instrumentation import load_adapter_class

    missing = None
    for name in ADAPTERS:
        try:
            adapter = load_adapter_class(name)()
        except ImportError:
            missing = (name, "its adapter is not available")
            break
        if adapter.installed_version() is None:
            missing = (name, f"{adapter.distribution} is not installed")
            break
    if missing is None:
        pytest.skip("every framework is installed here: nothing to flag")
    name, why = missing
    result = run_cli("doctor", env=clean_env(OTEL_BREAKER_FRAMEWORKS=name))
    assert result.returncode == 1
    assert f"OTEL_BREAKER_FRAMEWORKS selects: {name}" in result.stdout
    assert f"OTEL_BREAKER_FRAMEWORKS asks for {name}, but {why}" in result.stdout


def test_doctor_takes_no_arguments():
    result = run_cli("doctor", "--verbose")
    assert result.returncode == 2
    assert "unrecognized arguments: --verbose" in result.stderr


def test_doctor_shows_what_the_start_up_hook_did_in_its_own_process():
    result = run_cli("doctor", env=clean_env(OTEL_BREAKER_ENABLED="true"))
    out = result.stdout
    assert re.search(r"^  OTEL_BREAKER_ENABLED\s+True\s+env$", out, re.M)
    section = out.split("instrumented at start-up in this process:")[1].split("\n\n")[0]
    lines = [line for line in section.splitlines() if line.strip()]
    reported = {line.split()[0] for line in lines}
    assert reported <= set(ADAPTERS) and reported
    for line in lines:
        assert re.match(r"^    \w+\s+(active|skipped|waiting)", line), line
