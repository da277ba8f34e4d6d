"""Fixtures with real processes for the proxy's tests: the test server over streamable
HTTP, the proxy listening on HTTP, and a counter of the failing tool's real runs."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

pytest.importorskip("mcp")

from proxy_support import announced_url, breaker_env, free_port, server_command, stop, wait_for_port


@pytest.fixture
def runs(tmp_path):
    """A file the test server appends a line to per run of ``broken``; ``runs.count()``."""

    class Runs:
        path = tmp_path / f"runs-{uuid.uuid4().hex[:6]}.txt"

        def count(self) -> int:
            return len(self.path.read_text().splitlines()) if self.path.exists() else 0

    return Runs()


@pytest.fixture
def http_server():
    """The test server over streamable HTTP: its URL."""
    started: list[subprocess.Popen] = []

    def start(*args: str) -> str:
        port = free_port()
        proc = subprocess.Popen(server_command("--http", str(port), *args), stderr=subprocess.DEVNULL)
        started.append(proc)
        wait_for_port(port, proc)
        return f"http://127.0.0.1:{port}/mcp"

    yield start
    for proc in started:
        stop(proc)


@pytest.fixture
def listening_proxy():
    """``otel-breaker mcp-proxy --listen 127.0.0.1:0 -- server`` (or another listen address):
    the URL it announces."""
    started: list[subprocess.Popen] = []

    def start(
        *server_args: str,
        env: dict[str, str] | None = None,
        proxy_args: tuple[str, ...] = (),
        listen: str = "127.0.0.1:0",
    ) -> str:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "otel_breaker",
                "mcp-proxy",
                "--listen",
                listen,
                *proxy_args,
                "--",
                *server_command(*server_args),
            ],
            env=env if env is not None else breaker_env(),
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return announced_url(proc)

    yield start
    for proc in started:
        stop(proc)
