"""``opentelemetry-instrument`` without ``opentelemetry-distro`` exports what the
``OTEL_*`` variables ask for, as ``OTEL_BREAKER_ENABLED=true`` does.

Without the distro the launcher loads instrumentors but sets up no SDK, and
says nothing. A fresh virtual environment (``uv venv``, packages from uv's
cache) holds otel-breaker, the SDK and the OTLP/HTTP exporter, and no distro;
LangChain is the framework (the launcher loads an instrumentor only when one
of its libraries is installed); the program exports to a real OTLP receiver
on 127.0.0.1.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
from otel_support import Receiver

ROOT = pathlib.Path(__file__).parents[2]
PROGRAM = textwrap.dedent(
    """
    import langchain_core
    from otel_breaker import ToolCall
    from otel_breaker.instrumentation.base import FrameworkAdapter

    print(FrameworkAdapter().run_sync(ToolCall("lookup"), lambda: "found", (), {}))
    """
)


def _uv() -> list[str]:
    found = shutil.which("uv") or shutil.which("uv", path=str(pathlib.Path(sys.executable).parent))
    if found is None:
        pytest.skip("uv is not installed")
    return [found]


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("no-distro") / "venv"
    uv = _uv()
    subprocess.run([*uv, "venv", "-q", "--python", sys.executable, str(path)], check=True, timeout=120)
    python = path / "bin" / "python"
    # A real framework: the launcher loads an instrumentor only when one of its libraries is installed.
    packages = [
        "opentelemetry-sdk",
        "opentelemetry-instrumentation",
        "opentelemetry-exporter-otlp-proto-http",
        "langchain-core>=1.0,<2",
    ]
    done = subprocess.run(
        [*uv, "pip", "install", "-q", "--python", str(python), "-e", str(ROOT), *packages],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.skip(f"could not build the environment from uv's cache: {done.stderr[-500:]}")
    listed = subprocess.run([*uv, "pip", "list", "--python", str(python)], capture_output=True, text=True, check=True)
    assert "opentelemetry-distro" not in listed.stdout
    return path


@pytest.fixture
def receiver(tmp_path):
    receiver = Receiver(tmp_path)
    receiver.start()
    yield receiver
    receiver.stop()


def launch(venv: pathlib.Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "VIRTUAL_ENV"))}
    environment.update(env)
    command = [str(venv / "bin" / "opentelemetry-instrument"), str(venv / "bin" / "python"), "-c", PROGRAM]
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=120)


def test_the_launcher_without_the_distro_exports_as_the_variables_say(venv, receiver):
    result = launch(
        venv,
        OTEL_SERVICE_NAME="launched-without-distro",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{receiver.http_port}",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "found"
    text = receiver.wait_for("execute_tool lookup", "Name: otel_breaker.calls")
    assert "launched-without-distro" in text
    assert "Traceback" not in result.stderr


def test_the_launcher_with_nothing_asked_for_says_what_to_install(venv):
    result = launch(venv)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "otel-breaker" in line]
    assert len(lines) == 1, result.stderr
    assert "pip install opentelemetry-distro" in lines[0]
