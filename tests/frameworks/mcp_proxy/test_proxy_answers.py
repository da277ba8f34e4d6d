"""Every request the client sends through the proxy is answered, even one the SDK cannot read."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from proxy_support import breaker_env, server_command

HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


@pytest.mark.parametrize("params", ["a string", ["a", "list"], 7])
def test_a_request_whose_params_are_not_an_object_is_answered_invalid_request(params):
    proxy = subprocess.Popen(
        [sys.executable, "-m", "otel_breaker", "mcp-proxy", "--", *server_command()],
        env=breaker_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proxy.stdin is not None and proxy.stdout is not None

        def send(message: dict) -> None:
            proxy.stdin.write(json.dumps(message) + "\n")
            proxy.stdin.flush()

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO})
        assert json.loads(proxy.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": "bad-1", "method": "tools/call", "params": params})
        answer = json.loads(proxy.stdout.readline())
        assert answer["id"] == "bad-1" and answer["error"]["code"] == -32600
        # The session goes on.
        send(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "ok"}}}
        )
        assert json.loads(proxy.stdout.readline())["result"]["content"][0]["text"] == "echo: ok"
        proxy.stdin.close()
        assert proxy.wait(timeout=30) == 0
    finally:
        if proxy.poll() is None:
            proxy.kill()
            proxy.wait()
