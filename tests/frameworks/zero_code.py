"""Running an unmodified agent script in a subprocess, for the zero-code tests.

The scripts never import otel_breaker: they print a one-line JSON report of
what the tool and the model saw, and the tests compare an unguarded run with
runs guarded by ``OTEL_BREAKER_ENABLED=true`` and by ``opentelemetry-instrument``.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from otlp_receiver import OtlpReceiver

#: Traces over OTLP, and nothing else exported: the receiver counts spans.
TRACES_OVER_OTLP = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}


def script_env(*, drop: tuple[str, ...] = (), **extra: str) -> dict[str, str]:
    """This process's environment without any ``OTEL_*`` (or ``drop``) variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", *drop))}
    env.update(extra)
    return env


def launcher() -> list[str]:
    """The ``opentelemetry-instrument`` command of this environment."""
    found = shutil.which("opentelemetry-instrument", path=str(pathlib.Path(sys.executable).parent))
    if found is None:
        pytest.fail("opentelemetry-instrument is missing: install opentelemetry-distro (requirements.txt)")
    return [found]


def run_script(
    script: pathlib.Path,
    env: dict[str, str],
    *,
    marker: str,
    launch: list[str] | None = None,
    timeout: float = 300,
) -> tuple[dict, str]:
    """Run ``script`` (under ``launch``, if given); return the JSON of its last output
    line starting with ``marker`` (the marker itself removed when it is not JSON) and all stdout."""
    command = [*(launch or []), sys.executable, str(script)]
    done = subprocess.run(
        command, env=env, cwd=script.parent, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(marker)]
    assert lines, f"no report line starting with {marker!r} in:\n{done.stdout[-3000:]}"
    report = lines[-1] if marker.startswith("{") else lines[-1].removeprefix(marker)
    return json.loads(report), done.stdout


def exported_span_names(
    script: pathlib.Path,
    receiver: OtlpReceiver,
    protocol: str,
    body_runs: int,
    *,
    launch: list[str] | None = None,
    **env: str,
) -> dict[str, int]:
    """Run ``script`` (a ``{...}`` report line with ``body_runs``, the tool body's runs), its
    traces exported over OTLP ``protocol`` to ``receiver``: the received spans' names, counted."""
    report, _ = run_script(
        script, script_env(**TRACES_OVER_OTLP, **receiver.endpoint(protocol), **env), marker="{", launch=launch
    )
    assert report["body_runs"] == body_runs
    return receiver.names()
