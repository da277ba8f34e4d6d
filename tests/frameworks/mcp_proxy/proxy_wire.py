"""Talking to a proxy below the MCP client, for the tests of what a client library would
never send or show: JSON-RPC lines over the proxy's stdio, JSON-RPC messages POSTed over
streamable HTTP, and the rows of its status board."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable

from proxy_support import breaker_env, server_command

#: The ``initialize`` request's params of a plain client.
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


def stdio_proxy() -> subprocess.Popen:
    """``otel-breaker mcp-proxy`` in front of the test server, its stdio in text pipes."""
    return subprocess.Popen(
        [sys.executable, "-m", "otel_breaker", "mcp-proxy", "--", *server_command()],
        env=breaker_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def wire(proxy: subprocess.Popen) -> tuple[Callable[[dict], None], Callable[[], dict]]:
    """``send(message)`` and ``receive()``: one JSON-RPC message a line over the proxy's stdio."""
    assert proxy.stdin is not None and proxy.stdout is not None

    def send(message: dict) -> None:
        proxy.stdin.write(json.dumps(message) + "\n")
        proxy.stdin.flush()

    def receive() -> dict:
        return json.loads(proxy.stdout.readline())

    return send, receive


def end(proxy: subprocess.Popen) -> None:
    """Kill the proxy if the test left it running (a failed assertion)."""
    if proxy.poll() is None:
        proxy.kill()
        proxy.wait()


def http_post(url: str, message: dict, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    """One JSON-RPC message POSTed as a streamable-HTTP client does: status, headers, body."""
    request = urllib.request.Request(
        url,
        data=json.dumps(message).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def status_rows(port: int) -> list[dict]:
    """The rows of the status board served on 127.0.0.1:``port``, one a breaker."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as response:
        body = json.load(response)
    return body["breakers"] if isinstance(body, dict) else body
