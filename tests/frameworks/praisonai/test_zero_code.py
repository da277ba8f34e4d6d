"""The unmodified agent_script.py, guarded by OTEL_BREAKER_ENABLED and by opentelemetry-instrument."""

from __future__ import annotations

from pathlib import Path

import pytest
from zero_code import launcher, run_script, script_env

pytest.importorskip("praisonaiagents")

HERE = Path(__file__).parent
SCRIPT = HERE / "agent_script.py"
UNAVAILABLE = "is temporarily unavailable"


def run(extra_env: dict[str, str], launch: list[str] | None = None) -> dict:
    env = script_env(drop=("OPENAI_",), **{"PRAISONAI_TELEMETRY_DISABLED": "true", "DO_NOT_TRACK": "true", **extra_env})
    report, _ = run_script(SCRIPT, env, marker="RESULT ", launch=launch, timeout=240)
    return report


def assert_guarded(result: dict) -> None:
    assert result["runs"] == {"async": 2, "sync": 2}
    assert [UNAVAILABLE in seen for seen in result["async_seen"]] == [False, False, True, True]
    assert result["async_output"].startswith("done:")
    assert result["sync_errors"] == 2, "below the threshold the framework's own error still ends chat()"
    assert len(result["sync_seen"]) == 2 and all(UNAVAILABLE in seen for seen in result["sync_seen"])
    assert result["sync_output"].startswith("done:")


def test_unguarded_baseline():
    result = run({})
    assert result["runs"] == {"async": 4, "sync": 3}
    assert not any(UNAVAILABLE in seen for seen in result["async_seen"])
    assert result["sync_errors"] == 3 and result["sync_output"] is None


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
