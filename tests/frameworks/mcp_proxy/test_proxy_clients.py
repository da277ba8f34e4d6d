"""Several HTTP clients on one listening proxy: each receives only what its own calls caused.

A server's sampling request names no call on the wire, so the proxy sends it to the one
client whose call to that server is in flight, and answers the server with an error when
calls of several clients are; never the wrong client. Overlap is made with files the
test server's ``ask_when`` tool writes and waits for, not with sleeps.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError
from proxy_scenarios import PATIENCE, connect, text

pytestmark = pytest.mark.usefixtures("quiet_logs")


class Client:
    """What one client was asked to sample and the log lines it received."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.asked: list[str] = []
        self.logs: list[str] = []

    async def sampling(self, context: object, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.asked.append(params.messages[0].content.text)
        reply = types.TextContent(type="text", text=f"{self.name} answers")
        return types.CreateMessageResult(role="assistant", content=reply, model="test-model")

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(str(params.data))


async def wait_for_file(path: Path) -> None:
    with anyio.fail_after(PATIENCE):
        while not path.exists():
            await anyio.sleep(0.01)


async def test_two_http_clients_with_overlapping_sampling_calls_each_receive_only_their_own(listening_proxy, tmp_path):
    url = listening_proxy()
    a_started, b_started, a_done = tmp_path / "a-started", tmp_path / "b-started", tmp_path / "a-done"
    a, b = Client("A"), Client("B")
    results: dict[str, types.CallToolResult] = {}
    refused: list[str] = []
    async with (
        connect(url, mode="legacy", sampling_callback=a.sampling, logging_callback=a.log) as client_a,
        connect(url, mode="legacy", sampling_callback=b.sampling, logging_callback=b.log) as client_b,
    ):

        async def call_a() -> None:
            # A's tool starts, waits until B's call is in flight too, then samples.
            arguments = {"question": "A's private prompt", "mark": str(a_started), "wait_for": str(b_started)}
            try:
                results["A"] = await client_a.call_tool("ask_when", arguments)
            except MCPError as exc:  # the server's tool passes on the error its request got
                refused.append(exc.error.message)
            a_done.write_text("done")

        async def call_b() -> None:
            # B's call starts after A's, stays in flight while A samples, then samples itself.
            arguments = {"question": "B's question", "mark": str(b_started), "wait_for": str(a_done)}
            results["B"] = await client_b.call_tool("ask_when", arguments)

        with anyio.fail_after(4 * PATIENCE):
            async with anyio.create_task_group() as group:
                group.start_soon(call_a)
                await wait_for_file(a_started)
                group.start_soon(call_b)
    assert "A's private prompt" not in b.asked and not any("A's private" in line for line in b.logs)
    assert b.asked == ["B's question"] and text(results["B"]) == "model said: B answers"
    assert "asking: B's question" in b.logs
    # While both calls were in flight the proxy could not tell whose call asked: the server
    # was answered with an error, which its tool reported to A. A never saw B's answer.
    assert a.asked == [] and not any("B's" in line for line in a.logs)
    assert "A" not in results and len(refused) == 1 and "several clients" in refused[0]


async def test_one_http_client_among_several_gets_its_sampling_and_logs(listening_proxy):
    url = listening_proxy()
    a, b = Client("A"), Client("B")
    async with (
        connect(url, mode="legacy", sampling_callback=a.sampling, logging_callback=a.log) as client_a,
        connect(url, mode="legacy", sampling_callback=b.sampling, logging_callback=b.log) as client_b,
    ):
        await client_b.call_tool("echo", {"text": "b is connected"})
        result = await client_a.call_tool("ask_when", {"question": "only A's"})
    assert text(result) == "model said: A answers"
    assert a.asked == ["only A's"] and "asking: only A's" in a.logs
    assert b.asked == [] and b.logs == []
