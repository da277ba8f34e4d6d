"""Drives the OpenAI Agents SDK's Runner offline with its own scripted model, ``agents.testing.ScriptedModel``."""

from __future__ import annotations

import pathlib
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from contract import PROMPT, Sent, Step, Tool

set_tracing_disabled(True)


def sdk_tool(tool: Tool):
    def fn(x: int) -> str:
        return tool(x)

    fn.__name__ = tool.name
    fn.__doc__ = f"Looks up {tool.name} for x."
    return function_tool(fn, name_override=tool.name)


def script(steps: list[Step]) -> ScriptedModel:
    turns = []
    for i, step in enumerate(steps):
        if isinstance(step, str):
            turns.append([assistant_message(step)])
        else:
            name, arguments = step
            turns.append([function_call(name, dict(arguments), call_id=f"call_{i + 1}")])
    return ScriptedModel(turns)


class OpenAIAgentsDriver:
    framework = "openai_agents"
    script = pathlib.Path(__file__).with_name("agent_script.py")

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        return Agent(name=name, instructions=instructions, model=script(steps), tools=[sdk_tool(t) for t in tools])

    def run(self, agent: Any, prompt: str = "go") -> str:
        return Runner.run_sync(agent, prompt).final_output

    def sent(self, agent: Any) -> list[Sent]:
        return [
            Sent(
                call.system_instructions,
                [
                    str(item["output"])
                    for item in call.input
                    if isinstance(item, dict) and item.get("type") == "function_call_output"
                ],
            )
            for call in agent.model.calls
        ]

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return [
            {t.name: (t.description, getattr(t, "params_json_schema", None)) for t in call.tools}
            for call in agent.model.calls
        ]
