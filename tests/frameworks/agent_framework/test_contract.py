"""The shared framework contract, on Agent Framework's own agent loop (offline)."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from agent_framework import Agent, tool
from contract import PROMPT, FrameworkContract, Sent, Step, Tool
from loop_contract import LoopContract
from scripted_client import ScriptedChatClient


class AgentFrameworkDriver:
    framework = "agent_framework"
    script = pathlib.Path(__file__).with_name("agent_script.py")
    native_tool_spans = True

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        turns = [[(s[0], s[1], f"call_{i}")] if isinstance(s, tuple) else s for i, s in enumerate(steps, 1)]
        # the contract's tools fail more than three times in a row, the framework's default limit
        # (and the loop scenarios make 20 identical invalid calls in a row)
        client = ScriptedChatClient(turns, function_invocation_configuration={"max_consecutive_errors_per_request": 25})
        functions = [tool(t.__call__, name=t.name, description=f"The {t.name} tool.") for t in tools]
        return Agent(client=client, name=name, instructions=instructions, tools=functions)

    def run(self, agent: Any, prompt: str = "go") -> str:
        return asyncio.run(agent.run(prompt)).text

    def sent(self, agent: Any) -> list[Sent]:
        found = []
        for messages in agent.client.sent:
            system = messages[0].text if messages and messages[0].role == "system" else None
            results = [str(c.result) for m in messages for c in m.contents if c.type == "function_result"]
            found.append(Sent(system, results))
        return found

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return agent.client.tools_sent


class TestContract(FrameworkContract, LoopContract):
    driver = AgentFrameworkDriver()
    guards_unknown_tools = True
