"""The ``.pth`` start-up hook: nearly free in every process, started by a framework import.

Every Python process of an environment with ``OTEL_BREAKER_ENABLED=true`` runs
the hook (``pip`` too). It must import nothing heavy, print nothing, and never
crash the process, whatever the ``OTEL_BREAKER_*`` values; otel-breaker starts
on the first import of a supported framework, and bad values are then one log
line each, with the valid parts applied.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import sysconfig
import textwrap

import otel_breaker

FAKE_FRAMEWORK = pathlib.Path(__file__).parent / "fake_framework"
HEAVY = ["otel_breaker", "opentelemetry", "asyncio", "packaging", "importlib.metadata", "ssl", "wrapt", "logging"]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    # this checkout's otel_breaker (and its start-up hook), not an installed one
    source_root = pathlib.Path(otel_breaker.__file__).parents[1]
    environment["PYTHONPATH"] = os.pathsep.join((str(FAKE_FRAMEWORK), str(source_root)))
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=environment, timeout=120
    )


def test_the_installed_pth_file_is_this_one():
    installed = pathlib.Path(sysconfig.get_paths()["purelib"]) / "otel_breaker.pth"
    source = pathlib.Path(otel_breaker.__file__).parents[1] / "otel_breaker.pth"
    assert installed.read_text() == source.read_text(), "stale otel_breaker.pth installed: reinstall the package"


def test_enabled_without_a_framework_imports_nothing_heavy():
    result = run_python(
        f"""
        import sys
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
        print([type(f).__name__ for f in sys.meta_path if getattr(f, "otel_breaker_watch", False)])
        """,
        OTEL_BREAKER_ENABLED="true",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "['FrameworkImportWatch']"]
    assert result.stderr == ""


def test_bad_values_never_reach_a_process_that_imports_no_framework():
    result = run_python(
        "pass", OTEL_BREAKER_ENABLED="true", OTEL_BREAKER_FRAMEWORKS="langchian", OTEL_BREAKER_FAILURE_THRESHOLD="lots"
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


def test_bad_values_are_one_line_each_when_a_framework_is_imported_and_valid_parts_apply():
    result = run_python(
        """
        import langchain_core
        from otel_breaker.config import get_settings
        settings = get_settings()
        print(settings.frameworks, settings.defaults.failure_threshold, dict(settings.tools))
        """,
        OTEL_BREAKER_ENABLED="true",
        OTEL_BREAKER_FRAMEWORKS="langchain,langchian",
        OTEL_BREAKER_FAILURE_THRESHOLD="lots",
        OTEL_BREAKER_TOOLS="search=fast_api;fetch=warp_speed",
        OTEL_BREAKER_FAILURE_TRESHOLD="3",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "('langchain',) 5 {'search': {'failure_threshold': 3, 'recovery_timeout': 30.0}}"
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "OTEL_BREAKER_" in line]
    assert len(lines) == 4, result.stderr
    threshold, misspelt, frameworks, tools = sorted(lines, key=lambda line: line.split("OTEL_BREAKER_")[1])
    assert "OTEL_BREAKER_FRAMEWORKS='langchain,langchian'" in frameworks
    assert "unknown framework 'langchian' (allowed: langchain, openai_agents" in frameworks
    assert "the valid parts apply" in frameworks
    assert "OTEL_BREAKER_FAILURE_THRESHOLD='lots': expected a whole number >= 1; using the default" in threshold
    assert "'warp_speed' is not a preset" in tools and "the valid parts apply" in tools
    assert "OTEL_BREAKER_FAILURE_TRESHOLD is not an otel-breaker setting (misspelt?)" in misspelt


def test_the_framework_import_starts_otel_breaker_once():
    result = run_python(
        """
        import sys
        import langchain_core
        from otel_breaker.instrumentation import BreakerInstrumentor, autostart
        watch = [f for f in sys.meta_path if getattr(f, "otel_breaker_watch", False)]
        print(len(watch), watch[0].fired, autostart._started, BreakerInstrumentor().is_instrumented_by_opentelemetry)
        """,
        OTEL_BREAKER_ENABLED="true",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1 True True True"


def test_the_launcher_variable_switches_the_hook_off():
    result = run_python(
        "import sys, langchain_core; print('otel_breaker' in sys.modules)",
        OTEL_BREAKER_ENABLED="true",
        OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="redis,otel_breaker",
    )
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "False", "")
