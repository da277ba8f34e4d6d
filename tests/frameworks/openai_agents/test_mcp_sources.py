"""MCP servers in the OpenAI Agents SDK's real Runner loop: two stdio MCP servers both
expose ``search``; one is down. Each MCP tool is keyed by the server it was built for,
so the dead server's ``search`` opens while the healthy one keeps answering, and each
call is counted once although it passes through the function tool and the MCP session."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("agents.mcp")

from agents import Agent, Runner, set_tracing_disabled
from agents.mcp import MCPServerStdio
from agents.testing import ScriptedModel, assistant_message, function_call

from otel_breaker.breaker import State
from otel_breaker.config import load_settings, set_settings
from otel_breaker.registry import default_registry
from otel_breaker.upstream import upstream_name

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from mcp_search_server import stdio_command

set_tracing_disabled(True)

REJECTED_TEXT = "is temporarily unavailable"


@pytest.fixture(autouse=True)
def threshold_two():
    set_settings(load_settings({"OTEL_BREAKER_FAILURE_THRESHOLD": "2", "OTEL_BREAKER_RECOVERY_TIMEOUT": "600"}))


def server(name: str, mode: str) -> MCPServerStdio:
    command, args = stdio_command(name, mode)
    return MCPServerStdio({"command": command, "args": args}, name=name, client_session_timeout_seconds=30)


def run(agent: Agent, mcp_server: MCPServerStdio, times: int) -> list[str]:
    """``times`` runs of ``agent`` with ``mcp_server`` as its only MCP server; what the
    model read back from ``search`` each time."""

    async def go() -> list[str]:
        async with mcp_server:
            agent.mcp_servers = [mcp_server]
            read = []
            for i in range(times):
                model = ScriptedModel(
                    [[function_call("search", {"query": "lamps"}, call_id=f"c{i}")], [assistant_message("done")]]
                )
                agent.model = model
                await Runner.run(agent, "find lamps")
                (output,) = [
                    item["output"]
                    for item in model.calls[-1].input
                    if isinstance(item, dict) and item.get("type") == "function_call_output"
                ]
                read.append(output if isinstance(output, str) else str(output))
            return read

    return asyncio.run(go())


def test_a_dead_servers_search_opens_and_the_other_servers_search_keeps_answering(instrument):
    instrument("openai_agents", "mcp")
    agent = Agent(name="researcher", instructions="Find products.")
    down = run(agent, server("catalogue-a", "down"), 3)
    assert REJECTED_TEXT not in down[0] and REJECTED_TEXT not in down[1]
    assert REJECTED_TEXT in down[2]  # threshold two: the third call never reaches server A

    up = run(agent, server("catalogue-b", "up"), 3)
    assert all("catalogue-b: 3 results for 'lamps'" in text for text in up), up

    by_source = {b.source: b for b in default_registry().breakers() if b.name == "search"}
    assert set(by_source) == {"catalogue-a@1.0.0", "catalogue-b@1.0.0"}
    assert by_source["catalogue-a@1.0.0"].state is State.OPEN
    assert by_source["catalogue-b@1.0.0"].state is State.CLOSED


def test_each_call_is_counted_once_across_function_tool_and_session(instrument):
    instrument("openai_agents", "mcp")
    agent = Agent(name="researcher", instructions="Find products.")
    run(agent, server("catalogue-a", "down"), 1)
    tools = [b for b in default_registry().breakers() if upstream_name(b) is None]
    (breaker,) = tools
    assert (breaker.name, breaker.source, breaker.state) == ("search", "catalogue-a@1.0.0", State.CLOSED)
    # The server answered (with the tool's own error): its upstream breaker saw a success.
    (server_breaker,) = [b for b in default_registry().breakers() if upstream_name(b) is not None]
    assert server_breaker.state is State.CLOSED and server_breaker.stats.failure_count == 0


def test_healthy_mcp_servers_answer_the_same_with_and_without_breakers(instrument):
    def outputs() -> list[str]:
        agent = Agent(name="researcher", instructions="Find products.")
        return run(agent, server("catalogue-a", "up"), 2) + run(agent, server("catalogue-b", "up"), 2)

    without = outputs()
    instrument("openai_agents", "mcp")
    assert outputs() == without
    assert all("3 results for 'lamps'" in text for text in without)


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
    instrument("openai_agents", "mcp")
    agent = Agent(name="researcher", instructions="Find products.")
    run(agent, server("catalogue-a", "down"), 2)  # opens server A's search

    async def menu(mcp_server: MCPServerStdio) -> list[str]:
        async with mcp_server:
            agent.mcp_servers = [mcp_server]
            agent.model = ScriptedModel([[assistant_message("done")]])
            await Runner.run(agent, "find lamps")
            return [t.name for t in agent.model.calls[0].tools]

    assert asyncio.run(menu(server("catalogue-a", "down"))) == []
    assert asyncio.run(menu(server("catalogue-b", "up"))) == ["search"]
