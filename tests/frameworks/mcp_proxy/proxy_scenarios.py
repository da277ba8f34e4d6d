"""What a client does through the proxy, written once and run over every transport."""

from __future__ import annotations

import contextlib
from typing import Any

import anyio
import mcp.types as types
from mcp.client.client import Client
from proxy_support import THRESHOLD

UNAVAILABLE = "is temporarily unavailable"
# A bound on waiting for the proxy to notice a cooldown's end; the tests never assert on it.
PATIENCE = 30.0


def text(result: types.CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def session_view(client: Client) -> dict[str, Any]:
    """What a client learns at connect time."""
    session = client.session
    return {
        "server_info": session.server_info.model_dump() if session.server_info else None,
        "capabilities": session.server_capabilities.model_dump() if session.server_capabilities else None,
        "instructions": session.instructions,
    }


async def healthy_session(client: Client) -> dict[str, Any]:
    """Everything a healthy session sees: listings, a tool's result, resources, prompts."""
    tools = await client.session.list_tools()
    echo = await client.call_tool("echo", {"text": "hello"})
    resources = await client.session.list_resources()
    templates = await client.session.list_resource_templates()
    read = await client.session.read_resource("notes://today")
    templated = await client.session.read_resource("notes://day/monday")
    prompts = await client.session.list_prompts()
    prompt = await client.session.get_prompt("review", {"code": "x = 1"})
    return {
        **session_view(client),
        "tools": tools.model_dump(),
        "echo": echo.model_dump(),
        "resources": resources.model_dump(),
        "templates": templates.model_dump(),
        "read": read.model_dump(),
        "templated": templated.model_dump(),
        "prompts": prompts.model_dump(),
        "prompt": prompt.model_dump(),
    }


async def six_failing_calls(client: Client) -> list[types.CallToolResult]:
    return [await client.call_tool("broken", {"text": f"try {i}"}) for i in range(6)]


def assert_breaker_stopped_it(results: list[types.CallToolResult], ran: int) -> None:
    assert all(r.is_error for r in results)
    assert ran <= THRESHOLD, f"the failing tool ran {ran} times over 6 calls"
    assert UNAVAILABLE in text(results[-1]) and "broken" in text(results[-1])


class ListChanges:
    """Counts ``notifications/tools/list_changed`` a client receives."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.count += 1

    async def wait_beyond(self, seen: int) -> None:
        with anyio.fail_after(PATIENCE):
            while self.count <= seen:
                await anyio.sleep(0.02)


async def tool_names(client: Client) -> list[str]:
    return [t.name for t in (await client.session.list_tools()).tools]


async def hidden_tool_leaves_and_returns(client: Client, changes: ListChanges) -> None:
    """With OTEL_BREAKER_HIDE_OPEN_TOOLS and a short cooldown: the failing tool leaves the
    list when its breaker opens and comes back when it is half-open, each time announced."""
    assert "broken" in await tool_names(client)
    for i in range(THRESHOLD):
        await client.call_tool("broken", {"text": str(i)})
    await changes.wait_beyond(0)
    names = await tool_names(client)
    assert "broken" not in names and "echo" in names
    seen = changes.count
    await changes.wait_beyond(seen)  # the cooldown ended: back on the menu
    assert "broken" in await tool_names(client)


@contextlib.asynccontextmanager
async def connect(server: Any, **kwargs: Any):
    async with Client(server, **kwargs) as client:
        yield client
