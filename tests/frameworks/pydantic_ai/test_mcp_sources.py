"""MCP tools in PydanticAI's real agent loop: two stdio MCP servers both expose
``search``; one is down. Each tool is keyed by its server, so the dead server's
``search`` opens while the healthy one keeps answering, and every call is counted
once although it passes through both the toolset and the MCP session."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai.mcp")

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry
from otel_breaker.upstream import upstream_name

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mcp_search_server import stdio_command

REJECTED_TEXT = "is temporarily unavailable"


@pytest.fixture(autouse=True)
def threshold_two():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


def server(name: str, mode: str, *, prefix: str | None = None):
    command, args = stdio_command(name, mode)
    toolset = MCPToolset(
        StdioTransport(command, args), init_timeout=120, read_timeout=120
    )  # a busy machine starts slowly
    return toolset.prefixed(prefix) if prefix else toolset


class Script:
    """Calls ``tool`` once per run, then answers with what it read."""

    def __init__(self, tool: str = "search") -> None:
        self.tool = tool

    def respond(self, messages, info: AgentInfo) -> ModelResponse:
        returns = [
            p
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if p.part_kind in ("tool-return", "retry-prompt")
        ]
        if not returns:
            return ModelResponse(parts=[ToolCallPart(self.tool, {"query": "lamps"}, tool_call_id="c1")])
        content = returns[-1].content if isinstance(returns[-1], ToolReturnPart) else returns[-1].model_response()
        return ModelResponse(parts=[TextPart(str(content))])


def run(agent: Agent, toolset, times: int = 1, tool: str = "search") -> list[str]:
    """``times`` runs of ``agent`` with ``toolset`` (one server process for all of them)."""

    async def go() -> list[str]:
        async with toolset:
            model = FunctionModel(Script(tool).respond)
            return [(await agent.run("find lamps", toolsets=[toolset], model=model)).output for _ in range(times)]

    return asyncio.run(go())


def breakers_named(tool: str) -> list:
    return [b for b in default_registry().breakers() if b.name == tool]


def test_a_dead_servers_search_opens_and_the_other_servers_search_keeps_answering(instrument):
    instrument("pydantic_ai", "mcp")
    agent = Agent(name="researcher")
    down = run(agent, server("catalogue-a", "down"), 3)
    assert REJECTED_TEXT not in down[0] and REJECTED_TEXT not in down[1]
    assert REJECTED_TEXT in down[2]  # threshold two: the third call never reaches server A

    up = run(agent, server("catalogue-b", "up"), 3)
    assert up == ["catalogue-b: 3 results for 'lamps'"] * 3

    by_source = {b.source: b for b in breakers_named("search")}
    assert set(by_source) == {"catalogue-a@1.0.0", "catalogue-b@1.0.0"}
    assert by_source["catalogue-a@1.0.0"].state is State.OPEN
    assert by_source["catalogue-b@1.0.0"].state is State.CLOSED


def test_each_call_is_counted_once_across_toolset_and_session(instrument):
    """A prefixed toolset renames the tool for the model (``a_search``); the MCP session
    below sends ``search`` to the same server: one logical call, one breaker."""
    instrument("pydantic_ai", "mcp")
    agent = Agent(name="researcher")
    toolset = server("catalogue-a", "down", prefix="a")

    async def go() -> None:
        async with toolset:
            model = FunctionModel(Script("a_search").respond)
            first = (await agent.run("find lamps", toolsets=[toolset], model=model)).output
            assert REJECTED_TEXT not in first
            (breaker,) = [b for b in default_registry().breakers() if upstream_name(b) is None]
            assert (breaker.name, breaker.source) == ("a_search", "catalogue-a@1.0.0")
            assert breaker.state is State.CLOSED  # one failure of two: counted once, not twice
            await agent.run("find lamps", toolsets=[toolset], model=model)
            assert breaker.state is State.OPEN

    asyncio.run(go())
    assert [b.name for b in default_registry().breakers() if upstream_name(b) is None] == ["a_search"]


def test_healthy_mcp_servers_answer_the_same_with_and_without_breakers(instrument):
    def outputs() -> list[str]:
        agent = Agent(name="researcher")
        return run(agent, server("catalogue-a", "up"), 2) + run(agent, server("catalogue-b", "up"), 2)

    without = outputs()
    instrument("pydantic_ai", "mcp")
    assert (
        outputs()
        == without
        == [
            "catalogue-a: 3 results for 'lamps'",
            "catalogue-a: 3 results for 'lamps'",
            "catalogue-b: 3 results for 'lamps'",
            "catalogue-b: 3 results for 'lamps'",
        ]
    )


def test_hidden_tools_are_hidden_per_server(instrument):
    """With hiding on, the dead server's ``search`` leaves the menu; the other server's stays."""
    set_settings(
        load_settings(
            {
                "OTEL_BREAKER_FAILURE_THRESHOLD": "2",
                "OTEL_BREAKER_RECOVERY_TIMEOUT": "600",
                "OTEL_BREAKER_HIDE_OPEN_TOOLS": "true",
            }
        )
    )
    instrument("pydantic_ai", "mcp")
    agent = Agent(name="researcher")
    offered: list[list[str]] = []

    def respond(messages, info: AgentInfo) -> ModelResponse:
        offered.append([t.name for t in info.function_tools])
        return ModelResponse(parts=[TextPart("done")])

    async def menu(toolset) -> list[str]:
        async with toolset:
            offered.clear()
            await agent.run("find lamps", toolsets=[toolset], model=FunctionModel(respond))
            return offered[0]

    run(agent, server("catalogue-a", "down"), 2)  # opens server A's search
    assert asyncio.run(menu(server("catalogue-a", "down"))) == []
    assert asyncio.run(menu(server("catalogue-b", "up"))) == ["search"]
