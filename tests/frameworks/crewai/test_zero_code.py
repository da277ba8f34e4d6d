"""The unmodified agent_script.py, guarded by OTEL_BREAKER_ENABLED and by opentelemetry-instrument."""

from __future__ import annotations

from pathlib import Path

import pytest
from zero_code import launcher, run_script, script_env

pytest.importorskip("crewai")

HERE = Path(__file__).parent
SCRIPT = HERE / "agent_script.py"
UNAVAILABLE = "is temporarily unavailable"


def run(extra_env: dict[str, str], launch: list[str] | None = None) -> dict:
    env = script_env(
        drop=("OPENAI_",), **{"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false", **extra_env}
    )
    report, _ = run_script(SCRIPT, env, marker="RESULT ", launch=launch, timeout=600)
    return report


def assert_guarded(result: dict) -> None:
    # ReAct re-invokes a raising tool 6 times per action: 2 allowed actions, then rejections.
    assert result["runs"] == {"native": 2, "react": 12}
    for path in ("native", "react"):
        assert [UNAVAILABLE in seen for seen in result[f"{path}_seen"]] == [False, False, True, True]
        assert result[f"{path}_output"].strip() == "done after 4 tool results"


def test_unguarded_baseline():
    result = run({})
    assert result["runs"] == {"native": 4, "react": 24}
    assert not any(UNAVAILABLE in seen for seen in result["native_seen"] + result["react_seen"])


def test_enabled_by_environment():
    assert_guarded(
        run(
            {
                "OTEL_BREAKER_ENABLED": "true",
                "OTEL_BREAKER_FAILURE_THRESHOLD": "2",
            }
        )
    )


def test_opentelemetry_instrument_launcher():
    assert_guarded(
        run(
            {
                "OTEL_BREAKER_FAILURE_THRESHOLD": "2",
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_LOGS_EXPORTER": "none",
            },
            launch=launcher(),
        )
    )
