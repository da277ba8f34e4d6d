"""OTEL_BREAKER_HIDE_OPEN_TOOLS for MCP clients: an open tool leaves the client-side
tool listing (``Client.list_tools``, ``ClientSession.list_tools``) until its probe."""

from __future__ import annotations

import pytest
from status_prompt import COOLDOWN, quick_breaker_settings

pytest.importorskip("mcp")

from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent

UNAVAILABLE = "is temporarily unavailable"


pytestmark = pytest.mark.usefixtures("quiet_logs")


def make_server() -> tuple[MCPServer, dict]:
    runs = {"primary": 0, "backup": 0}
    server = MCPServer("search-server", version="1.0.0")

    @server.tool()
    def primary(x: int) -> str:
        """Looks it up in the primary index."""
        runs["primary"] += 1
        raise RuntimeError("primary index down")

    @server.tool()
    def backup(x: int) -> str:
        """Looks it up in the backup index."""
        runs["backup"] += 1
        return f"backup found {x}"

    return server, runs


def text(result) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def listings(client: Client) -> tuple[list[str], list[str]]:
    """The tool names the high-level client and its session list now."""
    high = [t.name for t in (await client.list_tools()).tools]
    low = [t.name for t in (await client.session.list_tools()).tools]
    return high, low


async def scenario(registry_clock=None) -> dict:
    """List, fail ``primary`` twice, list, call it anyway, let the cooldown pass, list."""
    server, runs = make_server()
    seen: dict = {}
    async with Client(server) as client:
        seen["first"] = (await client.list_tools()).model_dump()
        seen["before"] = await listings(client)
        seen["failures"] = [(await client.call_tool("primary", {"x": i})).is_error for i in range(2)]
        seen["open"] = await listings(client)
        anyway = await client.call_tool("primary", {"x": 3})
        seen["anyway"] = (anyway.is_error, UNAVAILABLE in text(anyway))
        seen["backup"] = text(await client.call_tool("backup", {"x": 4}))
        if registry_clock is not None:
            registry_clock.advance(COOLDOWN + 0.15)
        seen["after_cooldown"] = await listings(client)
    seen["runs"] = dict(runs)
    return seen


BOTH = ["primary", "backup"]


async def test_switch_off_the_listing_is_what_it_is_without_us(instrument, registry_clock):
    quick_breaker_settings()
    bare = await scenario()
    instrument("mcp")
    guarded = await scenario(registry_clock)
    assert guarded["first"] == bare["first"]
    assert guarded["open"] == bare["open"] == (BOTH, BOTH)
    assert guarded["anyway"] == (True, True)  # the breaker still rejects


async def test_switch_on_nothing_open_the_same_listing(instrument, registry_clock):
    quick_breaker_settings(hide_open_tools="true")
    server, _ = make_server()
    async with Client(server) as client:
        bare = (await client.list_tools()).model_dump(), (await client.session.list_tools()).model_dump()
    instrument("mcp")
    server, _ = make_server()
    async with Client(server) as client:
        guarded = (await client.list_tools()).model_dump(), (await client.session.list_tools()).model_dump()
    assert guarded == bare


async def test_open_tool_leaves_the_listing_until_its_probe(instrument, registry_clock):
    quick_breaker_settings(hide_open_tools="true")
    instrument("mcp")
    seen = await scenario(registry_clock)
    assert seen["before"] == (BOTH, BOTH)
    assert seen["failures"] == [True, True]
    assert seen["open"] == (["backup"], ["backup"])  # off the menu; the healthy alternative stays
    # A call to the hidden tool anyway gets the usual rejection result.
    assert seen["anyway"] == (True, True)
    assert seen["backup"] == "backup found 4"
    # Half-open after the cooldown: back on the menu, through the client's cache too.
    assert seen["after_cooldown"] == (BOTH, BOTH)
    assert seen["runs"] == {"primary": 2, "backup": 1}


async def test_another_servers_open_tool_of_the_same_name_hides_nothing(instrument, registry_clock):
    quick_breaker_settings(hide_open_tools="true")
    instrument("mcp")
    broken, _ = make_server()
    other = MCPServer("other-server", version="1.0.0")

    @other.tool()
    def primary(x: int) -> str:
        """Looks it up elsewhere."""
        return "elsewhere"

    async with Client(broken) as client:
        for i in range(2):
            await client.call_tool("primary", {"x": i})
        assert [t.name for t in (await client.list_tools()).tools] == ["backup"]
    async with Client(other) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["primary"]
