"""What the switch loads when a framework is imported: that framework's adapter and the
patches, nothing of the call path, which loads with the first tool call (the import-cost
budget)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from otel_breaker.instrumentation import ADAPTERS, FRAMEWORK_IMPORTS, load_adapter_class, target_modules

FAKE_FRAMEWORK = pathlib.Path(__file__).parent / "fake_framework"
SOURCE_ROOT = pathlib.Path(__file__).parents[2]  # this checkout's otel_breaker, not an installed one


def test_every_adapter_is_loaded_by_the_import_of_its_framework():
    for name, tops in FRAMEWORK_IMPORTS.items():
        modules = list(target_modules(load_adapter_class(name)()))
        assert any(m == top or m.startswith(top + ".") for m in modules for top in tops), name


def test_importing_a_framework_loads_only_what_a_call_needs():
    program = """
import sys
import langchain_core
loaded = set(sys.modules)
never = [
    "opentelemetry.instrumentation.instrumentor",  # BaseInstrumentor: the launcher's, not the switch's
    "otel_breaker.instrumentation.instrumentor",
    "otel_breaker.status_server",  # only with OTEL_BREAKER_STATUS_ADDR
    "otel_breaker.health",  # with the call path, at the first call
    "otel_breaker.cli",
    "otel_breaker.instrumentation.strands",  # another framework's adapter
    "otel_breaker.instrumentation.crewai",
    "packaging.requirements",
    "packaging.version",  # tested ranges are compared as numbers
    # The call path, its state machine, settings, registry and telemetry: the first call's.
    "otel_breaker.guards",
    "otel_breaker.call_path",
    "otel_breaker.breaker",
    "otel_breaker.config",
    "otel_breaker.registry",
    "otel_breaker.telemetry",
    "otel_breaker.loop_ledger",
    "opentelemetry.trace",
    "opentelemetry.metrics",
    "opentelemetry.sdk",  # no export asked for
    # Loaded by wrapt 2.x, importlib.metadata and the like, but by no tool call: a
    # framework that does not load them itself (LangChain's core) pays for them.
    "asyncio",
    "importlib.metadata",
    "wrapt",
    "email.utils",
    "zipfile",
]
print(sorted(m for m in never if m in loaded))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=os.pathsep.join((str(FAKE_FRAMEWORK), str(SOURCE_ROOT))), OTEL_BREAKER_ENABLED="true")
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_requirements_read_without_packaging_agree_with_packaging():
    from packaging.requirements import Requirement

    from otel_breaker.instrumentation.spec import split_requirement

    for name in ADAPTERS:
        requires = getattr(load_adapter_class(name), "requires", "")
        if requires:
            parsed = Requirement(requires)
            assert split_requirement(requires) == (parsed.name, str(parsed.specifier)), name


def test_the_first_breaker_made_loads_the_call_path_and_its_calls_import_nothing():
    """Importing the state machine loads no call path; the first breaker made loads it
    (before any call: a call must not wait on the import system, whose locks another
    thread may hold when the process forks), and runs its calls (sync, async and
    decorated) through it."""
    program = """
import asyncio, sys
from otel_breaker.breaker import CircuitBreaker
before = "otel_breaker.call_path" in sys.modules
breaker = CircuitBreaker("lookup")
created = "otel_breaker.call_path" in sys.modules
async def fetch():
    return 2
@CircuitBreaker("decorated")
def tripled(x):
    return 3 * x
print(before, created, breaker.call(lambda: 1), asyncio.run(breaker.acall(fetch)), tripled(2))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(PYTHONPATH=str(SOURCE_ROOT))
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "1", "2", "6"]
