"""What switching otel-breaker on costs every Python process of the environment.

``OTEL_BREAKER_ENABLED=true`` makes the ``.pth`` start-up hook run in every
interpreter (``pip`` too). Each benchmark spawns ``python -c pass`` (no agent
framework imported) and times it to exit, so the figures include interpreter
start-up; compare the medians in one run: ``on`` minus ``off`` is what the
switch adds. ``-S`` (no ``site``, so no ``.pth`` at all) is the floor.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROUNDS = 30


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
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
