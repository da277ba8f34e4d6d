"""The proxy's spans follow the GenAI and MCP conventions, and what a hostile client sends
reaches no log line, span or status row unbounded or with control characters.

Each ``tools/call`` has one tool span: the MCP SDK's server span of the call, named
``execute_tool {tool}`` and carrying the MCP attributes (``mcp.method.name``,
``mcp.session.id`` over HTTP) with the breaker's. Spans and log records are read from
the console exporters of a real proxy process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from typing import Any

from proxy_support import THRESHOLD, breaker_env, free_port, server_command
from proxy_wire import status_rows

HOSTILE = "\x1b[31mevil\x07\n\x00" + "z" * 100_000
#: The longest text the proxy puts in a span, a log record or a status row.
BOUND = 2_000
CONSOLE = {"OTEL_TRACES_EXPORTER": "console", "OTEL_LOGS_EXPORTER": "console"}
PATIENCE = 60


def console_records(output: str) -> list[dict[str, Any]]:
    """The JSON objects the console exporters wrote (spans and log records)."""
    decoder = json.JSONDecoder()
    found, position = [], 0
    while True:
        start = output.find("{\n", position)
        if start < 0:
            return found
        try:
            record, position = decoder.raw_decode(output, start)
        except ValueError:
            position = start + 1
            continue
        if isinstance(record, dict):
            found.append(record)


def spans(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if "context" in r and "kind" in r and "name" in r]


def texts(value: Any) -> list[str]:
    """Every string inside ``value`` (keys too)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in [*texts(k), *texts(v)]]
    if isinstance(value, list):
        return [t for v in value for t in texts(v)]
    return []


def assert_clean(where: str, value: Any) -> None:
    for text in texts(value):
        assert len(text) <= BOUND, f"{where}: a text of {len(text)} characters: {text[:80]!r}"
        assert "z" * 300 not in text, f"{where}: the hostile value came through: {text[:80]!r}"
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text), f"{where}: control characters in {text[:80]!r}"


class StdioClient:
    """A client that speaks the wire itself, so it can send what no SDK would."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "otel_breaker", "mcp-proxy", "--", *server_command()],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def send(self, message: dict) -> None:
        assert self.proxy.stdin is not None
        self.proxy.stdin.write(json.dumps(message) + "\n")
        self.proxy.stdin.flush()

    def receive(self) -> dict:
        assert self.proxy.stdout is not None
        return json.loads(self.proxy.stdout.readline())

    def answer_of(self, request_id: int, roots: list[dict] | None = None) -> dict:
        """The answer to ``request_id``; a roots request of the server on the way is answered ``roots``."""
        while True:
            message = self.receive()
            if message.get("method") == "roots/list":
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": {"roots": roots or []}})
            elif message.get("id") == request_id and "method" not in message:
                return message

    def finish(self) -> str:
        """Close stdin; what the proxy wrote on stderr."""
        _, stderr = self.proxy.communicate(timeout=PATIENCE)
        return stderr


def call(name: str, arguments: dict, request_id: int, meta: dict | None = None) -> dict:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def test_one_execute_tool_span_per_call_with_the_mcp_attributes_and_nothing_hostile_gets_through():
    status_port = free_port()
    client = StdioClient(breaker_env(**CONSOLE, OTEL_BREAKER_STATUS_ADDR=f"127.0.0.1:{status_port}"))
    hello = {
        "protocolVersion": "2025-11-25",
        "capabilities": {"roots": {"listChanged": True}},
        "clientInfo": {"name": HOSTILE, "version": HOSTILE, "title": HOSTILE},
    }
    client.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
    assert client.answer_of(0)["result"]["serverInfo"]["name"] == "proxy-test-server"
    client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    meta = {"progressToken": HOSTILE, "traceparent": HOSTILE, "io.example/x": HOSTILE}
    client.send(call("echo", {"text": "hi"}, 1, meta))
    assert client.answer_of(1)["result"]["content"][0]["text"] == "echo: hi"
    client.send(call(HOSTILE, {}, 2))
    assert client.answer_of(2)["result"]["isError"] is True
    client.send(call("roots", {}, 3))
    hostile_root = {"uri": "file:///" + HOSTILE.replace("\n", ""), "name": HOSTILE}
    client.answer_of(3, roots=[hostile_root])
    for request_id in range(4, 5 + THRESHOLD):
        client.send(call("broken", {"text": HOSTILE}, request_id))
        last = client.answer_of(request_id)
    assert "is temporarily unavailable" in last["result"]["content"][0]["text"]
    deadline = time.monotonic() + PATIENCE
    while True:  # the status endpoint answers from a snapshot taken once a second
        rows = status_rows(status_port)
        if any(row["tool"] == "broken" and row["state"] == "open" for row in rows):
            break
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
    stderr = client.finish()
    records = console_records(stderr)
    tool_spans = [s for s in spans(records) if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    names = [s["name"] for s in tool_spans]
    assert names.count("execute_tool echo") == 1 and not any(n.startswith("tools/call") for n in names)
    echo = next(s for s in tool_spans if s["name"] == "execute_tool echo")
    assert echo["attributes"]["mcp.method.name"] == "tools/call"
    assert echo["attributes"]["gen_ai.tool.name"] == "echo" and echo["attributes"]["otel_breaker.guarded"] is True
    assert echo["kind"] == "SpanKind.SERVER"
    assert "mcp.session.id" not in echo["attributes"]  # stdio has no session id
    assert names.count("execute_tool broken") == THRESHOLD + 1
    assert len(records) > 10
    for record in records:
        assert_clean("a span or log record", record)
    for row in rows:
        assert_clean("a status row", row)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", stderr.replace("\n", "").replace("\t", ""))
    assert "z" * 300 not in stderr, "the hostile value reached the proxy's stderr"
    assert {row["tool"] for row in rows} <= {"echo", "broken", "roots", "upstream:proxy-test-server@3.1.4"}


def test_over_http_the_tool_span_names_its_mcp_session(tmp_path):
    out = tmp_path / "spans.txt"
    with open(out, "w") as spans_file, open(tmp_path / "err.txt", "w") as errors:
        proxy = subprocess.Popen(
            [sys.executable, "-m", "otel_breaker", "mcp-proxy", "--listen", "127.0.0.1:0", "--", *server_command()],
            env=breaker_env(**CONSOLE, OTEL_BSP_SCHEDULE_DELAY="50"),  # exported while it runs
            stdin=subprocess.DEVNULL,
            stdout=spans_file,
            stderr=errors,
        )
    try:
        url = _announced(tmp_path / "err.txt", proxy)
        session = _http_session(url)
        answer = _http_post(url, call("echo", {"text": "hi"}, 1), session)
        assert "echo: hi" in answer
        deadline = time.monotonic() + PATIENCE
        while True:
            echo = [s for s in spans(console_records(out.read_text())) if s["name"] == "execute_tool echo"]
            if echo or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        proxy.terminate()
        proxy.wait(timeout=PATIENCE)
    assert len(echo) == 1
    assert echo[0]["attributes"]["mcp.session.id"] == session["mcp-session-id"]
    assert echo[0]["attributes"]["mcp.method.name"] == "tools/call"


def _announced(stderr_path, proxy: subprocess.Popen) -> str:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        match = re.search(r"serving MCP at (http://\S+)", stderr_path.read_text())
        if match:
            return match.group(1)
        assert proxy.poll() is None, stderr_path.read_text()
        time.sleep(0.05)
    raise AssertionError("the proxy did not announce its address")


def _http_post(url: str, message: dict, headers: dict[str, str]) -> str:
    request = urllib.request.Request(
        url,
        data=json.dumps(message).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
    )
    with urllib.request.urlopen(request, timeout=PATIENCE) as response:
        if "mcp-session-id" in response.headers and not headers:
            headers["mcp-session-id"] = response.headers["mcp-session-id"]
        return response.read().decode()


def _http_session(url: str) -> dict[str, str]:
    headers: dict[str, str] = {}
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    _http_post(url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}, headers)
    headers["mcp-protocol-version"] = "2025-11-25"
    _http_post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
    return headers
