"""Drives an MCP client loop offline: a real ``MCPServer`` in process, the SDK's
``Client``, and a scripted model (MCP has no agent loop or model of its own, so
the loop is the few lines every MCP host writes)."""

from __future__ import annotations

import asyncio
import pathlib
from dataclasses import dataclass, field
from typing import Any

from contract import PROMPT, Sent, Step, Tool
from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import TextContent


def tool_function(tool: Tool):
    def fn(x: int) -> str:
        return tool(x)

    return fn


def mcp_server(tools: list[Tool]) -> MCPServer:
    server = MCPServer("contract-server", version="1.0.0")
    for tool in tools:
        server.add_tool(tool_function(tool), name=tool.name, description=f"Looks up {tool.name} for x.")
    return server


@dataclass
class Agent:
    server: MCPServer
    steps: list[Step]
    instructions: str
    next_step: int = 0
    requests: list[Sent] = field(default_factory=list)
    tools_sent: list[dict[str, Any]] = field(default_factory=list)


class MCPDriver:
    framework = "mcp"
    #: The tools run in the server: their exceptions come back as isError answers.
    tools_run_in_process = False
    #: An MCP client session calls tools for no named agent.
    names_agents = False
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        return Agent(mcp_server(tools), steps, instructions)

    async def arun(self, agent: Agent, prompt: str = "go") -> str:
        results: list[str] = []
        async with Client(agent.server) as client:
            while True:
                # The host lists the server's tools for each model request, as hosts that follow
                # ``notifications/tools/list_changed`` do.
                listed = await client.list_tools()
                agent.tools_sent.append({t.name: (t.description, t.input_schema) for t in listed.tools})
                agent.requests.append(Sent(agent.instructions, list(results)))
                step = agent.steps[agent.next_step]
                agent.next_step += 1
                if isinstance(step, str):
                    return step
                name, arguments = step
                result = await client.call_tool(name, arguments)
                results.append("\n".join(c.text for c in result.content if isinstance(c, TextContent)))

    def run(self, agent: Agent, prompt: str = "go") -> str:
        return asyncio.run(self.arun(agent, prompt))

    def sent(self, agent: Agent) -> list[Sent]:
        return agent.requests

    def tools_sent(self, agent: Agent) -> list[dict[str, Any]]:
        return agent.tools_sent
