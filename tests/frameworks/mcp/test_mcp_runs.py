"""The run of an MCP client: its session, or the run its requests name in ``_meta``.

Real client and server (the SDK's ``Client`` over its in-process transport)."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent

from otel_breaker import runs
from otel_breaker.instrumentation.mcp import RUN_META_KEY

LOOP = "this exact call, with the same arguments"


pytestmark = pytest.mark.usefixtures("quiet_logs")


def server() -> MCPServer:
    made = MCPServer("runs-server", version="1.0.0")

    def lookup(x: int) -> str:
        return f"found {x}"

    made.add_tool(lookup, name="lookup", description="Looks up x.")
    return made


def text(result) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def sessions_calling_a_wrong_name(count: int, meta=None) -> list[str]:
    """``count`` separate client sessions, each calling a name the server has not once."""
    seen = []
    mcp_server = server()
    for _ in range(count):
        async with Client(mcp_server) as client:
            await client.list_tools()
            seen.append(text(await client.call_tool("lookup_order", {"x": 1}, meta=meta)))
    return seen


async def test_separate_sessions_each_get_the_servers_own_answer(instrument):
    plain = await sessions_calling_a_wrong_name(5)
    instrument("mcp")
    assert await sessions_calling_a_wrong_name(5) == plain
    assert not any(LOOP in answer for answer in plain)


async def test_one_session_repeating_a_wrong_name_meets_the_loop_guard(instrument):
    instrument("mcp")
    mcp_server = server()
    async with Client(mcp_server) as client:
        await client.list_tools()
        answers = [text(await client.call_tool("lookup_order", {"x": 1})) for _ in range(5)]
    assert not any(LOOP in a for a in answers[:3])
    assert "no tool of that name exists" in answers[3]


async def test_sessions_that_name_one_run_in_meta_share_it(instrument):
    instrument("mcp")
    answers = await sessions_calling_a_wrong_name(5, meta={RUN_META_KEY: "conversation-9"})
    assert not any("no tool of that name exists" in a for a in answers[:3])
    assert all("no tool of that name exists" in a for a in answers[3:])
    # Other runs are untouched by that one.
    assert not any("no tool of that name exists" in a for a in await sessions_calling_a_wrong_name(3))


async def test_a_traceparent_in_meta_names_the_run(instrument):
    instrument("mcp")
    trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    answers = await sessions_calling_a_wrong_name(4, meta={"traceparent": trace})
    assert "no tool of that name exists" in answers[3]


async def test_a_hostile_run_name_is_bounded_and_cleaned(instrument):
    instrument("mcp")
    hostile = "run\x1b[31m\x00" + "x" * 100_000
    answers = await sessions_calling_a_wrong_name(4, meta={RUN_META_KEY: hostile})
    assert "no tool of that name exists" in answers[3]  # still one run, named by the cleaned name
    named = runs.named_run(hostile)
    assert named is not None and len(named.id) == runs.MAX_RUN_ID_CHARS and named.id.isprintable()
    assert named.id.startswith("run") and "\x1b" not in named.id


async def test_a_frameworks_run_around_the_session_wins(instrument):
    instrument("mcp")
    mcp_server = server()
    with runs.run("agent-run") as outer:
        for _ in range(4):
            async with Client(mcp_server) as client:
                await client.list_tools()
                answer = text(await client.call_tool("lookup_order", {"x": 1}))
    assert outer.id == "agent-run" and "no tool of that name exists" in answer
