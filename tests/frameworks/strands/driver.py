"""The contract driver for Strands Agents: a real ``Agent`` with the scripted model."""

from __future__ import annotations

import pathlib
from typing import Any

from contract import PROMPT, Sent, Step, Tool
from scripted_model import ScriptedModel
from strands import Agent, tool


def strands_tool(spec: Tool) -> Any:
    def body(x: int) -> str:
        return spec(x)

    return tool(name=spec.name, description=f"The {spec.name} tool.")(body)


class StrandsDriver:
    framework = "strands"
    native_tool_spans = True
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        model = ScriptedModel(steps)
        return Agent(
            model=model,
            tools=[strands_tool(t) for t in tools],
            system_prompt=instructions,
            name=name,
            callback_handler=None,
        )

    def run(self, agent: Any, prompt: str = "go") -> str:
        return str(agent(prompt)).strip()

    def sent(self, agent: Any) -> list[Sent]:
        return [Sent(r["system_prompt"], r["tool_results"]) for r in agent.model.requests]

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return [r["tools"] for r in agent.model.requests]
