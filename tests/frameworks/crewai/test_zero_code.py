"""The unmodified agent_script.py, guarded by OTEL_BREAKER_ENABLED and by opentelemetry-instrument."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("crewai")

HERE = Path(__file__).parent
SCRIPT = HERE / "agent_script.py"
UNAVAILABLE = "is temporarily unavailable"


def run_script(extra_env: dict[str, str], launcher: list[str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env.update({"CREWAI_DISABLE_TELEMETRY": "true", "CREWAI_TRACING_ENABLED": "false", **extra_env})
    command = [*(launcher or []), sys.executable, str(SCRIPT)]
    done = subprocess.run(command, env=env, cwd=HERE, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def assert_guarded(result: dict) -> None:
    # ReAct re-invokes a raising tool 6 times per action: 2 allowed actions, then rejections.
    assert result["runs"] == {"native": 2, "react": 12}
    for path in ("native", "react"):
        assert [UNAVAILABLE in seen for seen in result[f"{path}_seen"]] == [False, False, True, True]
        assert result[f"{path}_output"].strip() == "done after 4 tool results"


def test_unguarded_baseline():
    result = run_script({})
    assert result["runs"] == {"native": 4, "react": 24}
    assert not any(UNAVAILABLE in seen for seen in result["native_seen"] + result["react_seen"])


def test_enabled_by_environment():
    assert_guarded(
        run_script(
            {
                "OTEL_BREAKER_ENABLED": "true",
                "OTEL_BREAKER_FAILURE_THRESHOLD": "2",
            }
        )
    )


def test_opentelemetry_instrument_launcher():
    launcher = shutil.which("opentelemetry-instrument", path=str(Path(sys.executable).parent))
    if launcher is None:
        pytest.skip("opentelemetry-instrument is not installed")
    assert_guarded(
        run_script(
            {
                "OTEL_BREAKER_FAILURE_THRESHOLD": "2",
                "OTEL_TRACES_EXPORTER": "none",
                "OTEL_METRICS_EXPORTER": "none",
                "OTEL_LOGS_EXPORTER": "none",
            },
            launcher=[launcher],
        )
    )
