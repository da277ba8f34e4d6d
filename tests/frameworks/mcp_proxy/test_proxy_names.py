"""The proxy's messages name a server as its breakers do (``name@version``), and say
"restarting" of a stdio server, whose process is started again, and "reconnecting" of an
HTTP server, which is only connected to again."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
from proxy_scenarios import PATIENCE, connect, text
from proxy_support import breaker_env, free_port, server_command, stop, wait_for_port

IDENTITY = "proxy-test-server@3.1.4"


def start_proxy(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path, str]:
    """The proxy listening on HTTP (its log lines in a file): the process, the file, its URL."""
    log = tmp_path / f"proxy-{len(list(tmp_path.iterdir()))}.log"
    with open(log, "w") as stderr:
        proxy = subprocess.Popen(
            [sys.executable, "-m", "otel_breaker", "mcp-proxy", "--listen", "127.0.0.1:0", *args],
            env=breaker_env(OTEL_BREAKER_FAILURE_THRESHOLD="100"),
            stdin=subprocess.DEVNULL,
            stderr=stderr,
        )
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        match = re.search(r"serving MCP at (http://\S+)", log.read_text())
        if match:
            return proxy, log, match.group(1)
        assert proxy.poll() is None, log.read_text()
        time.sleep(0.05)
    raise AssertionError("the proxy did not serve")


async def wait_for_line(log: Path, pattern: str) -> str:
    with anyio.fail_after(PATIENCE):
        while not re.search(pattern, log.read_text()):
            await anyio.sleep(0.05)
    return log.read_text()


async def test_an_http_server_that_goes_away_is_reconnecting_and_named_by_its_identity(tmp_path):
    port = free_port()
    server = subprocess.Popen(server_command("--http", str(port)), stderr=subprocess.DEVNULL)
    wait_for_port(port, server)
    upstream = f"http://127.0.0.1:{port}/mcp"
    proxy, log, url = start_proxy(tmp_path, "--upstream", upstream, "--restart-delay", "30")
    try:
        async with connect(url, mode="legacy") as client:
            assert text(await client.call_tool("echo", {"text": "1"})) == "echo: 1"
            stop(server)
            answer = text(await client.call_tool("echo", {"text": "anyone?"}))
            assert f"MCP server {IDENTITY} is unreachable" in answer
            lines = await wait_for_line(log, r"is down; reconnecting in")
            answer = text(await client.call_tool("echo", {"text": "still?"}))
            assert f"MCP server {IDENTITY} is not connected (reconnecting)" in answer
    finally:
        stop(proxy)
        stop(server)
    assert f"MCP server {IDENTITY} is down; reconnecting in 30s" in lines
    assert "restart" not in lines and "'server'" not in lines


async def test_a_stdio_server_that_dies_is_restarting_and_named_by_its_identity(tmp_path):
    proxy, log, url = start_proxy(tmp_path, "--restart-delay", "30", "--", *server_command())
    try:
        async with connect(url, mode="legacy") as client:
            os.kill(int(text(await client.call_tool("pid", {}))), signal.SIGKILL)
            lines = await wait_for_line(log, r"is down; restarting in")
            answer = text(await client.call_tool("echo", {"text": "anyone?"}))
            assert f"MCP server {IDENTITY} is not connected (restarting)" in answer
    finally:
        stop(proxy)
    assert f"MCP server {IDENTITY} is down; restarting in 30s" in lines
    assert "reconnect" not in lines and "'server'" not in lines
