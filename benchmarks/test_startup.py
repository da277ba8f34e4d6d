"""What switching otel-breaker on costs every Python process of the environment.

``OTEL_BREAKER_ENABLED=true`` makes the ``.pth`` start-up hook run in every
interpreter (``pip`` too). Each benchmark spawns ``python -c pass`` (no agent
framework imported) and times it to exit, so the figures include interpreter
start-up; compare the medians in one run: ``on`` minus ``off`` is what the
switch adds. ``-S`` (no ``site``, so no ``.pth`` at all) is the floor.

With a framework imported the switch does its work (config, the framework's
adapter and the call path, patching): ``test_framework_import`` times
``python -c "import <framework>"`` with the switch off and on, interleaved
(off, on, off, on, ...) so both see the same machine load, and reports the
medians of CPU time (the child's user + system: what the import costs, little
moved by other load on the machine) and of wall time, and their differences, in
``extra_info`` (and on stdout with ``-s``).
No ``OTEL_*`` exporter is asked for: setting the SDK up is the user's export,
timed apart in ``test_framework_import_with_export``.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import time

import pytest

ROUNDS = 30


def _env(**extra: str) -> dict[str, str]:
    # Without PYTHONDONTWRITEBYTECODE: every import would be compiled anew each run,
    # which no installed program pays.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def _spawn(args: list[str], env: dict[str, str]) -> None:
    subprocess.run([sys.executable, *args], env=env, check=True)


@pytest.mark.parametrize(
    ("variant", "args", "env"),
    [
        ("no site (floor)", ["-S", "-c", "pass"], _env()),
        ("off", ["-c", "pass"], _env()),
        ("on, no framework imported", ["-c", "pass"], _env(OTEL_BREAKER_ENABLED="true")),
        (
            "on, bad OTEL_BREAKER_* values",
            ["-c", "pass"],
            _env(OTEL_BREAKER_ENABLED="true", OTEL_BREAKER_FRAMEWORKS="langchian", OTEL_BREAKER_TIMEOUT="soon"),
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
@pytest.mark.benchmark(group="start-up: python -c pass")
def test_interpreter_start_up(benchmark, variant, args, env):
    _spawn(args, env)  # warm the file-system cache
    benchmark.pedantic(_spawn, args=(args, env), rounds=ROUNDS, iterations=1)


#: Interleaved pairs per framework import (each a fresh interpreter): enough that the
#: median of a 0.8 s import (PydanticAI's) moves by a few milliseconds between runs, not 20.
PAIRS = 31
FRAMEWORK_IMPORTS = ("langchain_core.tools", "pydantic_ai", "strands")


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one interpreter: CPU time (user + system of the
    child) is what the import costs; wall time also holds waiting for a busy machine."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    _spawn(args, env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _interleaved(module: str, on_env: dict[str, str], pairs: int = PAIRS) -> dict[str, float]:
    args = ["-c", f"import {module}"]
    off_env = _env()
    _spawn(args, off_env)  # warm the file-system cache
    _spawn(args, on_env)
    off, on = [], []
    for _ in range(pairs):
        off.append(_timed(args, off_env))
        on.append(_timed(args, on_env))
    figures = {}
    for index, kind in ((1, "cpu"), (0, "wall")):
        off_ms = statistics.median(t[index] for t in off) * 1000
        on_ms = statistics.median(t[index] for t in on) * 1000
        figures.update({f"{kind}_off_ms": round(off_ms, 1), f"{kind}_on_ms": round(on_ms, 1)})
        figures[f"{kind}_added_ms"] = round(on_ms - off_ms, 1)
    return figures


def _line(module: str, figures: dict[str, float]) -> str:
    return (
        f"{module}: CPU off {figures['cpu_off_ms']} ms, on {figures['cpu_on_ms']} ms, "
        f"+{figures['cpu_added_ms']} ms; wall +{figures['wall_added_ms']} ms"
    )


def _installed(module: str) -> None:
    if importlib.util.find_spec(module.split(".")[0]) is None:
        pytest.skip(f"{module} is not installed here")


@pytest.mark.parametrize("module", FRAMEWORK_IMPORTS)
@pytest.mark.benchmark(group="start-up: import a framework, switch off vs on (interleaved medians)")
def test_framework_import(benchmark, module):
    _installed(module)
    figures = benchmark.pedantic(_interleaved, args=(module, _env(OTEL_BREAKER_ENABLED="true")), rounds=1)
    benchmark.extra_info.update(figures)
    print("\n" + _line(module, figures))


@pytest.mark.parametrize("module", FRAMEWORK_IMPORTS)
@pytest.mark.benchmark(group="start-up: import a framework, switch on with OTLP export (interleaved medians)")
def test_framework_import_with_export(benchmark, module):
    """The SDK and the OTLP/HTTP exporter set up at the framework's import (what
    ``opentelemetry-instrument`` pays at start-up for the same variables)."""
    _installed(module)
    env = _env(
        OTEL_BREAKER_ENABLED="true",
        OTEL_TRACES_EXPORTER="otlp",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",  # nothing is exported during an import
    )
    figures = benchmark.pedantic(_interleaved, args=(module, env), rounds=1)
    benchmark.extra_info.update(figures)
    print("\n" + _line(f"{module} + OTLP export", figures))
