"""The loop guard on a FastMCP client loop: a real in-memory FastMCP server, the
``fastmcp.Client`` and a scripted model (FastMCP has no agent loop of its own, so
the loop is the few lines every FastMCP host writes). Only the fastmcp adapter is
instrumented: its logical call (``call_tool_mcp``) is what the loop guard sees."""

from __future__ import annotations

import asyncio
import pathlib
import sys
from dataclasses import dataclass, field

import pytest

pytest.importorskip("fastmcp")
sys.path.insert(0, str(pathlib.Path(__file__).parent))

from contract import PROMPT, Sent, Step, Tool
from fastmcp import Client, FastMCP
from loop_contract import LoopContract
from run_contract import RunContract

pytestmark = pytest.mark.usefixtures("quiet_logs")


def tool_function(tool: Tool):
    def fn(x: int) -> str:
        return tool(x)

    return fn


def fastmcp_server(tools: list[Tool]) -> FastMCP:
    server = FastMCP("loop-server")
    for tool in tools:
        server.tool(tool_function(tool), name=tool.name, description=f"Looks up {tool.name} for x.")
    return server


@dataclass
class Agent:
    server: FastMCP
    steps: list[Step]
    next_step: int = 0
    requests: list[Sent] = field(default_factory=list)
    menus: list[list[str]] = field(default_factory=list)


class FastMCPDriver:
    framework = "fastmcp"

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        return Agent(fastmcp_server(tools), steps)

    async def arun(self, agent: Agent) -> str:
        results: list[str] = []
        async with Client(agent.server) as client:
            while True:
                # The host offers the model the client's listing each turn.
                agent.menus.append([tool.name for tool in await client.list_tools()])
                agent.requests.append(Sent(PROMPT, list(results)))
                step = agent.steps[agent.next_step]
                agent.next_step += 1
                if isinstance(step, str):
                    return step
                name, arguments = step
                result = await client.call_tool(name, arguments, raise_on_error=False)
                results.append("\n".join(getattr(c, "text", "") for c in result.content))

    def run(self, agent: Agent, prompt: str = "go") -> str:
        return asyncio.run(self.arun(agent))

    def sent(self, agent: Agent) -> list[Sent]:
        return agent.requests

    def tools_sent(self, agent: Agent) -> list[list[str]]:
        return agent.menus


class TestLoops(LoopContract, RunContract):
    driver = FastMCPDriver()
