"""Zero-code: the same unmodified Claude Agent SDK program, with otel-breaker off, switched on
by ``OTEL_BREAKER_ENABLED=true``, and under ``opentelemetry-instrument``."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("claude_agent_sdk")

from zero_code import launcher, run_script, script_env

SCRIPT = Path(__file__).parent / "agent_script.py"
UNAVAILABLE = "is temporarily unavailable"


def _run(env: dict[str, str], launch: list[str] | None = None) -> dict:
    report, _ = run_script(SCRIPT, env, marker='{"body_runs"', launch=launch, timeout=600)
    return report


def test_an_unmodified_program_is_unchanged_with_the_switch_off():
    report = _run(script_env())
    assert report["body_runs"] == 9
    assert all(result == "service down" for results in report["tool_results"] for result in results)
    assert report["finals"] == ["done", "done", "done"]


@pytest.mark.parametrize("how", ["variable", "opentelemetry-instrument"])
def test_the_switch_alone_stops_a_dead_tool_across_requests(how):
    env = script_env(OTEL_BREAKER_ENABLED="true", OTEL_BREAKER_FAILURE_THRESHOLD="2")
    if how == "opentelemetry-instrument":
        env.update(OTEL_TRACES_EXPORTER="none", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    report = _run(env, launcher() if how == "opentelemetry-instrument" else None)
    assert report["body_runs"] == 2
    results = [result for request in report["tool_results"] for result in request]
    assert results[:2] == ["service down", "service down"]
    assert all(UNAVAILABLE in result for result in results[2:])
    assert all(all(flags) for flags in report["errors"])  # each rejection reached Claude as an error result
    assert report["finals"] == ["done", "done", "done"]
