"""The MCP Inspector's CLI (``@modelcontextprotocol/inspector`` from npm, the TypeScript
SDK's client) lists and calls tools through the proxy, over stdio and over HTTP.

The package is fetched by ``npx`` once; where npm cannot fetch it the tests are skipped
and say so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from proxy_support import THRESHOLD, breaker_env, server_command

INSPECTOR = "@modelcontextprotocol/inspector@0.15.0"
#: Generous: npx may download the package, and node starts slowly on a busy machine.
FETCH_SECONDS = 600
CALL_SECONDS = 120


@pytest.fixture(scope="module")
def inspector() -> list[str]:
    """The command that runs the Inspector's CLI (fetched once)."""
    if shutil.which("npx") is None:
        pytest.skip("the MCP Inspector needs Node.js's npx: install Debian's nodejs and npm packages")
    command = ["npx", "-y", INSPECTOR, "--cli"]
    try:
        fetched = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=FETCH_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.skip(f"npm could not fetch {INSPECTOR} within {FETCH_SECONDS}s")
    if fetched.returncode != 0:
        pytest.skip(f"npm could not fetch {INSPECTOR}: {fetched.stderr.strip()[-300:]}")
    return command


def run(inspector: list[str], target: list[str], *method: str, env: dict[str, str] | None = None) -> dict:
    """One Inspector CLI call: its JSON answer."""
    done = subprocess.run(
        [*inspector, *target, *method],
        capture_output=True,
        text=True,
        timeout=CALL_SECONDS,
        env=env if env is not None else {**os.environ, **breaker_env()},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def proxy_command() -> list[str]:
    return [sys.executable, "-m", "otel_breaker", "mcp-proxy", "--", *server_command()]


def test_the_inspector_lists_and_calls_tools_through_the_proxy_over_stdio(inspector):
    listed = run(inspector, proxy_command(), "--method", "tools/list")
    assert {"echo", "broken", "pid"} <= {tool["name"] for tool in listed["tools"]}
    called = run(inspector, proxy_command(), "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "text=hi")
    assert called["content"][0]["text"] == "echo: hi" and called["isError"] is False


def test_the_inspector_lists_and_calls_tools_through_the_listening_proxy(inspector, listening_proxy):
    url = listening_proxy()
    target = [url, "--transport", "http"]
    listed = run(inspector, target, "--method", "tools/list")
    assert "echo" in {tool["name"] for tool in listed["tools"]}
    called = run(inspector, target, "--method", "tools/call", "--tool-name", "echo", "--tool-arg", "text=hi")
    assert called["content"][0]["text"] == "echo: hi"
    # One proxy serves every call: the failing tool's breaker opens for the Inspector too.
    broken = ["--method", "tools/call", "--tool-name", "broken", "--tool-arg", "text=x"]
    answers = [run(inspector, target, *broken) for _ in range(THRESHOLD + 1)]
    assert all(answer["isError"] for answer in answers)
    assert "is temporarily unavailable" in answers[-1]["content"][0]["text"]
