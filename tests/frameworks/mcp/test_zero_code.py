"""The unmodified agent script, guarded through OTEL_BREAKER_ENABLED and through opentelemetry-instrument."""

from __future__ import annotations

import pathlib

import pytest
from zero_code import launcher, run_script, script_env

pytest.importorskip("mcp")

SCRIPT = pathlib.Path(__file__).with_name("agent_script.py")
UNAVAILABLE = "Tool 'weather' is temporarily unavailable"


def test_script_unguarded_baseline():
    out, _ = run_script(SCRIPT, script_env(), marker="{")
    assert out["body_runs"] == 5
    assert not any(UNAVAILABLE in t for t in out["tool_results"])


def test_env_switch_guards_the_script():
    env = script_env(OTEL_BREAKER_ENABLED="true", OTEL_BREAKER_FAILURE_THRESHOLD="2")
    out, _ = run_script(SCRIPT, env, marker="{")
    assert out["body_runs"] == 2
    assert sum(UNAVAILABLE in t for t in out["tool_results"]) == 3
    assert out["final"] == "done"


def test_opentelemetry_instrument_guards_the_script():
    env = script_env(
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    out, stdout = run_script(SCRIPT, env, marker='{"body_runs"', launch=launcher())
    assert out["body_runs"] == 2
    assert sum(UNAVAILABLE in t for t in out["tool_results"]) == 3
    assert '"name": "execute_tool weather"' in stdout
