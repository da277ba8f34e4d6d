"""The door of the proxy's HTTP mode, with the real proxy and raw HTTP requests.

Every listen address checks ``Host`` (421) and ``Origin`` (403); a token makes every
request carry ``Authorization: Bearer`` (401). The proxy bound to 0.0.0.0 is reached
on 127.0.0.1 only: these tests never send traffic off the machine's loopback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from urllib.parse import urlsplit

import pytest
from proxy_support import breaker_env
from proxy_wire import HELLO, http_post

TOKEN = "s3cret-token-0123456789"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": HELLO,
}


def call_echo(url: str, headers: dict[str, str] | None = None) -> str:
    """Initialize, then ``tools/call echo``: the answer's body."""
    status, answer_headers, _ = http_post(url, INITIALIZE, headers)
    assert status == 200
    session = {"Mcp-Session-Id": answer_headers["mcp-session-id"], **(headers or {})}
    http_post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "hi"}}}
    status, _, body = http_post(url, call, session)
    assert status == 200
    return body


def on_loopback(url: str) -> str:
    """The announced URL with a wildcard address replaced by 127.0.0.1."""
    parts = urlsplit(url)
    return url.replace(parts.netloc, f"127.0.0.1:{parts.port}", 1)


def test_a_loopback_address_other_than_127_0_0_1_checks_host_and_origin(listening_proxy):
    url = listening_proxy(listen="127.0.0.2:0")
    assert "127.0.0.2" in url
    assert http_post(url, INITIALIZE, {"Host": "evil.example"})[0] == 421
    assert http_post(url, INITIALIZE, {"Origin": "http://evil.example"})[0] == 403
    assert http_post(url, INITIALIZE, {"Host": "evil.example", "Origin": "http://evil.example"})[0] == 421
    assert http_post(url, INITIALIZE, {"Origin": "http://127.0.0.2:1234"})[0] == 200
    assert http_post(url, INITIALIZE, {"Host": "localhost"})[0] == 200
    assert "echo: hi" in call_echo(url)


def test_a_token_is_required_on_every_request_and_never_shown(listening_proxy, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    url = listening_proxy(listen="127.0.0.2:0", proxy_args=("--token-file", str(token_file)))
    good = {"Authorization": f"Bearer {TOKEN}"}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        status, answer_headers, body = http_post(url, INITIALIZE, headers)
        assert status == 401 and answer_headers.get("www-authenticate") == "Bearer"
        assert TOKEN not in body
    assert http_post(url, INITIALIZE, {**good, "Host": "evil.example"})[0] == 421
    assert "echo: hi" in call_echo(url, good)
    # A request of the session without the token is refused too.
    status, answer_headers, _ = http_post(url, INITIALIZE, good)
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}}
    assert http_post(url, call, {"Mcp-Session-Id": answer_headers["mcp-session-id"]})[0] == 401


def test_the_token_from_the_environment_and_a_wildcard_address(listening_proxy):
    url = listening_proxy(
        listen="0.0.0.0:0", proxy_args=("--allow-remote",), env=breaker_env(OTEL_BREAKER_PROXY_TOKEN=TOKEN)
    )
    local = on_loopback(url)
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert http_post(local, INITIALIZE)[0] == 401
    assert http_post(local, INITIALIZE, {**good, "Host": "evil.example"})[0] == 421
    assert http_post(local, INITIALIZE, {**good, "Origin": "http://evil.example"})[0] == 403
    assert "echo: hi" in call_echo(local, good)


def test_allow_host_adds_a_name(listening_proxy):
    url = listening_proxy(
        listen="0.0.0.0:0",
        proxy_args=("--allow-remote", "--allow-host", "proxy.internal"),
        env=breaker_env(OTEL_BREAKER_PROXY_TOKEN=TOKEN),
    )
    local = on_loopback(url)
    good = {"Authorization": f"Bearer {TOKEN}"}
    assert (
        http_post(local, INITIALIZE, {**good, "Host": "proxy.internal:8765", "Origin": "https://proxy.internal"})[0]
        == 200
    )
    assert http_post(local, INITIALIZE, {**good, "Host": "other.internal"})[0] == 421


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--listen", "0.0.0.0:0", "--allow-remote"], "needs a token"),
        (["--listen", "127.0.0.1:0", "--token-file", "/no/such/token"], "cannot read it"),
    ],
)
def test_an_open_network_proxy_or_a_bad_token_file_does_not_start(args, says):
    done = subprocess.run(
        [sys.executable, "-m", "otel_breaker", "mcp-proxy", *args, "--", "server"],
        capture_output=True,
        text=True,
        timeout=60,
        env=breaker_env(),
    )
    assert done.returncode == 2 and says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
