"""The unmodified agent_script.py, guarded by OTEL_BREAKER_ENABLED and by opentelemetry-instrument."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("praisonaiagents")

HERE = Path(__file__).parent
SCRIPT = HERE / "agent_script.py"
UNAVAILABLE = "is temporarily unavailable"


def run_script(extra_env: dict[str, str], launcher: list[str] | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    env.update({"PRAISONAI_TELEMETRY_DISABLED": "true", "DO_NOT_TRACK": "true", **extra_env})
    command = [*(launcher or []), sys.executable, str(SCRIPT)]
    done = subprocess.run(command, env=env, cwd=HERE, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def assert_guarded(result: dict) -> None:
    assert result["runs"] == {"async": 2, "sync": 2}
    assert [UNAVAILABLE in seen for seen in result["async_seen"]] == [False, False, True, True]
    assert result["async_output"].startswith("done:")
    assert result["sync_errors"] == 2, "below the threshold the framework's own error still ends chat()"
    assert len(result["sync_seen"]) == 2 and all(UNAVAILABLE in seen for seen in result["sync_seen"])
    assert result["sync_output"].startswith("done:")


def test_unguarded_baseline():
    result = run_script({})
    assert result["runs"] == {"async": 4, "sync": 3}
    assert not any(UNAVAILABLE in seen for seen in result["async_seen"])
    assert result["sync_errors"] == 3 and result["sync_output"] is None


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
