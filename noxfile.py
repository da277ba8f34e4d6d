"""Test sessions: lint, the core suite, and one environment per agent framework.

The frameworks' dependencies conflict (and CrewAI alone is about 1 GB), so each
framework suite runs in its own virtual environment, created with uv. Every
session installs through uv's one shared cache (hard links, no second download),
so with a warm cache the run is test time. The core suite spreads its test files
over the machine's cores with pytest-xdist (``-n auto --dist loadfile``): much of it
waits on real servers and subprocesses, so even two busy cores finish it in about a
third of the serial time (5 min against 15 on a loaded 2-core machine).
Run everything with ``nox``; one framework with ``nox -s "framework(name='crewai')"``.
"""

from __future__ import annotations

import pathlib
import runpy

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = False
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "tests", "api_only", "framework"]  # `nox -s benchmarks` runs on demand

ROOT = pathlib.Path(__file__).parent
#: The framework catalogue, run by path (it imports nothing; importing the package would need
#: OpenTelemetry in nox's own environment).
CATALOGUE = runpy.run_path(str(ROOT / "otel_breaker" / "catalogue.py"))
#: One session per framework (and the MCP proxy's): ``tests/frameworks/<name>/requirements.txt``,
#: written from the catalogue, holds what it installs.
FRAMEWORKS = list(CATALOGUE["TEST_SESSIONS"])
#: The frameworks the benchmarks import (LangChain's tool call; importing each with the switch off and on).
BENCHMARK_FRAMEWORKS = ("langchain", "pydantic_ai", "strands")
#: The framework suites whose test files run on two workers, a file each at a time: their tests
#: mostly wait on real server processes, each listening on a port found free as it starts, with
#: its files under its own tmp_path (Redis keys under a prefix of their own), so two files at
#: once share nothing but the machine.
PARALLEL_FRAMEWORKS = ("mcp_proxy",)
TEST_DEPS = [
    "pytest>=8",
    "pytest-xdist>=3.5",
    "pytest-asyncio>=0.23",
    "opentelemetry-sdk>=1.27",
    "opentelemetry-exporter-prometheus>=0.48b0",
    "prometheus-client>=0.20",
]


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff lint and format check; the layers contract (an import cycle fails); the
    documentation site builds with no warning (broken links fail); the wheel and sdist
    build and pass ``twine check`` (the package index would render their description)."""
    session.install("ruff>=0.6", "mkdocs-material>=9.5", "import-linter>=2.1", "build>=1.2", "twine>=5", "-e", ".")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("lint-imports")
    session.run(
        "mkdocs", "build", "--strict", "--site-dir", session.create_tmp() + "/site", env={"NO_MKDOCS_2_WARNING": "1"}
    )
    dist = pathlib.Path(session.create_tmp()) / "dist"
    for old in dist.glob("*"):
        old.unlink()
    session.run("python", "-m", "build", "--outdir", str(dist), ".")
    session.run("twine", "check", "--strict", *(str(path) for path in sorted(dist.glob("*"))))


@nox.session
def build(session: nox.Session) -> None:
    """The release artefacts: wheel and sdist in dist/, checked with twine (docs/release.md).
    Nothing is uploaded."""
    session.install("build>=1.2", "twine>=5")
    dist = ROOT / "dist"
    for old in dist.glob("otel_breaker-*"):
        old.unlink()
    session.run("python", "-m", "build", "--outdir", str(dist), ".")
    session.run("twine", "check", "--strict", *(str(path) for path in sorted(dist.glob("otel_breaker-*"))))


@nox.session
def tests(session: nox.Session) -> None:
    """The core suite: state machine, registry, guard, telemetry, CLI, dashboards, Redis."""
    session.install("-e", ".[dev]")
    session.run(
        "pytest", "tests", "--ignore=tests/frameworks", "-q", "-n", "auto", "--dist", "loadfile", *session.posargs
    )


@nox.session
def api_only(session: nox.Session) -> None:
    """The breaker and the call path with nothing but opentelemetry-api and wrapt installed."""
    session.install("opentelemetry-api>=1.27", "wrapt>=1.14", "pytest>=8", "pytest-asyncio>=0.23", "hypothesis>=6.100")
    session.install("--no-deps", "-e", ".")
    session.run(
        "python",
        "-c",
        "import importlib.util, sys; sys.exit(importlib.util.find_spec('opentelemetry.sdk') is not None)",
    )
    core = ["test_breaker.py", "test_stateful.py", "test_concurrency.py", "test_guard.py", "test_deadline.py"]
    session.run("pytest", *(f"tests/{name}" for name in core), "-q", *session.posargs)


@nox.session
@nox.parametrize("name", FRAMEWORKS)
def framework(session: nox.Session, name: str) -> None:
    """One agent framework's real offline agent loops, in its own environment."""
    session.install("-e", ".", *TEST_DEPS, "-r", f"tests/frameworks/{name}/requirements.txt")
    workers = ["-n", "2", "--dist", "loadfile"] if name in PARALLEL_FRAMEWORKS else []
    session.run("pytest", f"tests/frameworks/{name}", "-q", *workers, *session.posargs)
    example = ROOT / "examples" / f"{name}_flaky_tool.py"
    if example.exists():
        session.run("python", str(example), env={"CREWAI_DISABLE_TELEMETRY": "true", "OTEL_SDK_DISABLED": "true"})


@nox.session
def benchmarks(session: nox.Session) -> None:
    """Speed against a bare call and the peer breakers (numbers go to docs/performance.md);
    langchain-core for the framework-level benchmark, and pydantic-ai and Strands for the
    start-up one (importing each with the switch off and on)."""
    tested = [CATALOGUE["BY_ID"][name].requirement for name in BENCHMARK_FRAMEWORKS]
    session.install("-e", ".[dev]", *tested)
    session.run("pytest", "benchmarks", "-q", "--benchmark-columns=min,median,mean,ops", *session.posargs)
