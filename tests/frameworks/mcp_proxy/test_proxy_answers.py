"""Every request through the proxy is answered: one the SDK cannot read, one too large to
read, one whose answer is too large, one in flight when the server dies."""

from __future__ import annotations

import json
import os
import signal
import time

import anyio
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError
from proxy_scenarios import PATIENCE, connect, text
from proxy_support import breaker_env, free_port, proxied
from proxy_wire import HELLO, end, http_post, status_rows, stdio_proxy, wire


@pytest.mark.parametrize("params", ["a string", ["a", "list"], 7])
def test_a_request_whose_params_are_not_an_object_is_answered_invalid_request(params):
    proxy = stdio_proxy()
    try:
        send, receive = wire(proxy)

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO})
        assert receive()["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": "bad-1", "method": "tools/call", "params": params})
        answer = receive()
        assert answer["id"] == "bad-1" and answer["error"]["code"] == -32600
        # The session goes on.
        send(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "ok"}}}
        )
        assert receive()["result"]["content"][0]["text"] == "echo: ok"
        proxy.stdin.close()
        assert proxy.wait(timeout=30) == 0
    finally:
        end(proxy)


@pytest.mark.parametrize("params", ["a string", ["a", "list"], 7])
def test_over_http_a_request_whose_params_are_not_an_object_is_answered_invalid_request(listening_proxy, params):
    url = listening_proxy()
    status, headers, _ = http_post(url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO})
    assert status == 200
    session = {"mcp-session-id": headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    http_post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    status, _, body = http_post(
        url, {"jsonrpc": "2.0", "id": "bad-1", "method": "tools/call", "params": params}, session
    )
    answer = json.loads(body)
    assert status == 400 and answer["id"] == "bad-1" and answer["error"]["code"] == -32600
    assert "a string" not in body  # what was sent is not echoed
    echo = {"name": "echo", "arguments": {"text": "ok"}}
    status, _, body = http_post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": echo}, session)
    assert status == 200 and "echo: ok" in body
    # A valid request refused for another reason keeps the SDK's own answer.
    status, _, body = http_post(url, {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}})
    assert status == 400 and "params must be an object" not in body


# -- an answer too large to read -------------------------------------------------------------------

LIMIT = 64 * 1024 * 1024


@pytest.mark.parametrize(
    ("head", "tail", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"text":"xx', b'xx"}]}}\n', {"jsonrpc": "2.0", "id": 7}),
        (
            b'{"result":{"content":[{"text":"xx',
            b'xx"}]},"jsonrpc":"2.0","id":"a-1"}\n',
            {"jsonrpc": "2.0", "id": "a-1"},
        ),
        # An "id" inside the large value is never taken for the message's.
        (b'{"result":{"items":[{"id":1', b'{"id":9}]}}\n', {}),
        (b'{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{"x":"', b'"}}', {"method": "x"}),
    ],
)
def test_the_small_members_of_an_overlong_message_are_read_off_its_edges(head, tail, expected):
    from otel_breaker.mcp_proxy.stdio import edge_members

    members, _ = edge_members(head, tail)
    for key, value in expected.items():
        if key == "method":
            assert members["method"] == "sampling/createMessage"
        else:
            assert members[key] == value
    if not expected:
        assert "id" not in members


async def test_an_answer_over_64_mib_answers_its_request_with_an_error_and_counts_for_the_upstream():
    status_port = free_port()
    env = breaker_env(OTEL_BREAKER_STATUS_ADDR=f"127.0.0.1:{status_port}")
    async with connect(proxied(env=env), mode="legacy") as client:
        with anyio.fail_after(PATIENCE):
            result = await client.call_tool("big", {"size": LIMIT + 1})
        assert result.is_error and "too large" in text(result) and str(LIMIT) in text(result)
        # The session goes on, and the next line read is the next answer, not the rest of the big one.
        assert text(await client.call_tool("echo", {"text": "after"})) == "echo: after"
        with anyio.fail_after(PATIENCE):
            while True:
                rows = {row["tool"]: row for row in status_rows(status_port)}
                upstream = rows.get("upstream:proxy-test-server@3.1.4")
                if upstream is not None and upstream["failures"] >= 1:
                    break
                await anyio.sleep(0.2)
    assert rows["big"]["failures"] == 0  # the tool answered: only the server's link lost it


def test_a_request_over_64_mib_from_the_client_is_answered_invalid_request():
    proxy = stdio_proxy()
    try:
        send, receive = wire(proxy)
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": HELLO})
        assert receive()["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        huge = {"name": "echo", "arguments": {"text": "x" * (LIMIT + 1)}}
        send({"jsonrpc": "2.0", "id": "huge", "method": "tools/call", "params": huge})
        answer = receive()
        assert answer["id"] == "huge" and answer["error"]["code"] == -32600
        send(
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "ok"}}}
        )
        assert receive()["result"]["content"][0]["text"] == "echo: ok"
    finally:
        end(proxy)


# -- a server that dies mid-call -------------------------------------------------------------------


async def test_a_call_in_flight_when_the_server_dies_is_answered_at_once(runs):
    proxy = proxied("--runs", str(runs.path), proxy_args=("--restart-delay", "30"))
    async with connect(proxy, mode="legacy") as client:
        server_pid = int(text(await client.call_tool("pid", {})))
        answers: list[types.CallToolResult] = []

        async def hang() -> None:
            answers.append(await client.call_tool("hang", {}))

        with anyio.fail_after(PATIENCE):
            async with anyio.create_task_group() as group:
                group.start_soon(hang)
                while "started" not in (runs.path.read_text() if runs.path.exists() else ""):
                    await anyio.sleep(0.02)
                killed_at = time.monotonic()
                os.kill(server_pid, signal.SIGKILL)
        waited = time.monotonic() - killed_at
    # The tool would run for an hour; the proxy answers when the server's pipe closes, well
    # before its restart (30 s away), and says which server.
    assert answers[0].is_error and "proxy-test-server@3.1.4 is unreachable" in text(answers[0])
    assert waited < 20, f"the call was answered {waited:.1f}s after the server died"


# -- a server's request too large to read ----------------------------------------------------------


async def test_a_server_request_over_64_mib_is_answered_so_the_server_is_not_left_waiting():
    asked: list[int] = []

    async def sampling(context: object, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append(len(params.messages[0].content.text))
        reply = types.TextContent(type="text", text="answered")
        return types.CreateMessageResult(role="assistant", content=reply, model="test-model")

    async with connect(proxied(), mode="legacy", sampling_callback=sampling) as client:
        with anyio.fail_after(PATIENCE):
            try:
                answer = text(await client.call_tool("ask_big", {"size": LIMIT + 1}))
            except MCPError as exc:  # the server's tool passes on the error its request got
                answer = exc.error.message
        # The server's own sampling request was refused, and its tool ended with that error.
        assert f"a message over {LIMIT} bytes" in answer and asked == []
        assert text(await client.call_tool("ask_big", {"size": 10})) == "model said: answered"
