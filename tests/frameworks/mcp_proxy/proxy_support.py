"""Helpers for the proxy's tests: the test server (stdio or streamable HTTP), the proxy
command (``python -m otel_breaker mcp-proxy``) and their environments."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from mcp.client.stdio import StdioServerParameters

SERVER = Path(__file__).with_name("server.py")
THRESHOLD = 3
# No collector here: no exporter tries to reach one.
QUIET_OTEL = {"OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none", "OTEL_LOGS_EXPORTER": "none"}


def breaker_env(**extra: str) -> dict[str, str]:
    """The environment of a proxy: this interpreter's, the breaker settings of the tests, ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(QUIET_OTEL)
    env.update({"OTEL_BREAKER_FAILURE_THRESHOLD": str(THRESHOLD), "OTEL_BREAKER_RECOVERY_TIMEOUT": "60"})
    env.update(extra)
    return env


def server_command(*args: str) -> list[str]:
    return [sys.executable, str(SERVER), *args]


def direct(*server_args: str) -> StdioServerParameters:
    """The test server as a client would start it without the proxy."""
    return StdioServerParameters(command=sys.executable, args=[str(SERVER), *server_args], env=breaker_env())


def proxied(*server_args: str, proxy_args: tuple[str, ...] = (), env: dict[str, str] | None = None):
    """The same server behind ``otel-breaker mcp-proxy`` over stdio."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "otel_breaker", "mcp-proxy", *proxy_args, "--", *server_command(*server_args)],
        env=env if env is not None else breaker_env(),
    )


def proxy_with(*proxy_args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    """``otel-breaker mcp-proxy PROXY_ARGS`` (``--upstream`` or ``--config``) over stdio."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "otel_breaker", "mcp-proxy", *proxy_args],
        env=env if env is not None else breaker_env(),
    )


def announced_url(proxy: subprocess.Popen) -> str:
    """The URL a proxy started with ``--listen`` (stderr in a text pipe) says it serves MCP at."""
    assert proxy.stderr is not None
    for line in proxy.stderr:
        match = re.search(r"serving MCP at (http://\S+)", line)
        if match:
            return match.group(1)
    raise RuntimeError(f"the proxy exited ({proxy.wait()}) without serving")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"the process exited ({proc.returncode}) before listening on {port}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
