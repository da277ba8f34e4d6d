"""Zero-code: an unmodified PydanticAI program, guarded from the environment only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("agent_script.py")
REJECTED_TEXT = "Tool 'fetch_weather' is temporarily unavailable"


def run_script(command: list[str], **env: str) -> dict:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_"))}
    environ.update(env)
    done = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    # The console exporter may print spans too: the script's report is the line with "body_runs".
    (line,) = [line for line in done.stdout.splitlines() if line.startswith('{"body_runs"')]
    return json.loads(line)


def test_unguarded_baseline_runs_the_failing_tool_every_time():
    out = run_script([sys.executable, str(SCRIPT)])
    assert out["body_runs"] == 4
    assert not any(REJECTED_TEXT in text for text in out["seen"])


def test_enabled_from_environment():
    out = run_script(
        [sys.executable, str(SCRIPT)],
        OTEL_BREAKER_ENABLED="true",
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
    )
    assert out["final_output"] == "done"
    assert out["body_runs"] == 2
    assert [REJECTED_TEXT in text for text in out["seen"]] == [False, False, True, True]


def test_opentelemetry_instrument_loads_the_instrumentor():
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    if not launcher.exists():
        found = shutil.which("opentelemetry-instrument")
        if found is None:
            pytest.fail("opentelemetry-instrument is not installed in the test environment")
        launcher = Path(found)
    out = run_script(
        [str(launcher), sys.executable, str(SCRIPT)],
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    assert out["final_output"] == "done"
    assert out["body_runs"] == 2
    assert [REJECTED_TEXT in text for text in out["seen"]] == [False, False, True, True]
