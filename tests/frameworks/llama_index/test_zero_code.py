"""The unmodified agent script, guarded through OTEL_BREAKER_ENABLED and through opentelemetry-instrument."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("llama_index.core")

SCRIPT = pathlib.Path(__file__).with_name("agent_script.py")
UNAVAILABLE = "Tool 'weather' is temporarily unavailable"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OTEL_BREAKER_"))}
    env.update(extra)
    return env


def _run(argv: list[str], env: dict[str, str]) -> dict:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    line = [x for x in proc.stdout.splitlines() if x.startswith("{")][-1]
    return json.loads(line)


def test_script_unguarded_baseline():
    out = _run([sys.executable, str(SCRIPT)], _env())
    assert out["body_runs"] == 5
    assert not any(UNAVAILABLE in t for t in out["tool_results"])


def test_env_switch_guards_the_script():
    out = _run([sys.executable, str(SCRIPT)], _env(OTEL_BREAKER_ENABLED="true", OTEL_BREAKER_FAILURE_THRESHOLD="2"))
    assert out["body_runs"] == 2
    assert sum(UNAVAILABLE in t for t in out["tool_results"]) == 3
    assert out["final"] == "done"


def test_opentelemetry_instrument_guards_the_script():
    launcher = shutil.which("opentelemetry-instrument", path=str(pathlib.Path(sys.executable).parent))
    if launcher is None:
        pytest.fail("opentelemetry-instrument missing: install opentelemetry-distro (requirements.txt)")
    env = _env(
        OTEL_BREAKER_FAILURE_THRESHOLD="2",
        OTEL_TRACES_EXPORTER="console",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
    )
    proc = subprocess.run(
        [launcher, sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith('{"body_runs"'))
    out = json.loads(line)
    assert out["body_runs"] == 2
    assert sum(UNAVAILABLE in t for t in out["tool_results"]) == 3
    assert '"name": "execute_tool weather"' in proc.stdout
