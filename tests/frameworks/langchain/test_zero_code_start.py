"""Zero-code start-up with a real LangGraph agent: a misspelt framework name is one
line and the valid ones stay guarded; parallel first tool calls all get their spans."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from zero_code import run_script, script_env

pytest.importorskip("langgraph")

HERE = pathlib.Path(__file__).parent
UNAVAILABLE = "Tool 'weather' is temporarily unavailable"


def test_a_misspelt_framework_is_one_line_and_langchain_stays_guarded():
    env = script_env(
        OTEL_BREAKER_ENABLED="true",
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_BREAKER_FRAMEWORKS="langchain,langchian",
    )
    done = subprocess.run(
        [sys.executable, str(HERE / "agent_script.py")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    out = __import__("json").loads(done.stdout.splitlines()[-1])
    assert out["body_runs"] == 2  # guarded: the breaker opened after two failures
    assert sum(UNAVAILABLE in t for t in out["tool_results"]) == 3
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if "otel-breaker" in line]
    assert len(lines) == 1, done.stderr
    assert "OTEL_BREAKER_FRAMEWORKS='langchain,langchian'" in lines[0] and "'langchian'" in lines[0]


def test_parallel_first_tool_calls_all_get_their_spans():
    unguarded, _ = run_script(HERE / "parallel_script.py", script_env(), marker="{")
    env = script_env(OTEL_BREAKER_ENABLED="true", OTEL_TRACES_EXPORTER="console")
    guarded, stdout = run_script(HERE / "parallel_script.py", env, marker='{"body_runs"')
    assert guarded == unguarded  # the agent's outcome is the same
    assert guarded["body_runs"] == 8
    assert stdout.count('"name": "execute_tool lookup"') == 8
