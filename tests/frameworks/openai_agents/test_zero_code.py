"""Zero-code: an unmodified OpenAI Agents SDK program, guarded from the environment only."""

from __future__ import annotations

from pathlib import Path

from zero_code import launcher, run_script, script_env

SCRIPT = Path(__file__).with_name("agent_script.py")
REJECTED_TEXT = "Tool 'fetch_weather' is temporarily unavailable"
# The console exporter may print spans too: the script's report is the line with "body_runs".
REPORT = '{"body_runs"'


def test_unguarded_baseline_runs_the_failing_tool_every_time():
    out, _ = run_script(SCRIPT, script_env(drop=("OPENAI_",)), marker=REPORT)
    assert out["body_runs"] == 4
    assert not any(REJECTED_TEXT in text for text in out["seen"])


def test_enabled_from_environment():
    env = script_env(drop=("OPENAI_",), OTEL_BREAKER_ENABLED="true", OTEL_BREAKER_FAILURE_THRESHOLD="2")
    out, _ = run_script(SCRIPT, env, marker=REPORT)
    assert out["final_output"] == "done"
    assert out["body_runs"] == 2
    assert [REJECTED_TEXT in text for text in out["seen"]] == [False, False, True, True]


def test_opentelemetry_instrument_loads_the_instrumentor():
    env = script_env(
        drop=("OPENAI_",),
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    out, _ = run_script(SCRIPT, env, marker=REPORT, launch=launcher())
    assert out["final_output"] == "done"
    assert out["body_runs"] == 2
    assert [REJECTED_TEXT in text for text in out["seen"]] == [False, False, True, True]
