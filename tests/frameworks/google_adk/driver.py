"""The contract driver for Google ADK: a real ``LlmAgent`` and runner with the scripted model."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from contract import PROMPT, Sent, Step, Tool
from google.adk.agents import LlmAgent
from scripted_model import ScriptedLlm, error_response, run


def adk_tool(spec: Tool) -> Any:
    def body(x: int) -> str:
        return spec(x)

    body.__name__ = spec.name
    body.__doc__ = f"The {spec.name} tool."
    return body


class ADKDriver:
    framework = "google_adk"
    script = pathlib.Path(__file__).with_name("agent_script.py")
    native_tool_spans = True

    def build(self, tools: list[Tool], steps: list[Step], *, name: str = "assistant", instructions: str = PROMPT):
        model = ScriptedLlm(steps=list(steps), requests=[])
        return LlmAgent(
            name=name,
            model=model,
            instruction=instructions,
            tools=[adk_tool(t) for t in tools],
            on_tool_error_callback=error_response,
        )

    def run(self, agent: Any, prompt: str = "go") -> str:
        return asyncio.run(run(agent, prompt))

    def sent(self, agent: Any) -> list[Sent]:
        return [Sent(r["system_instruction"], r["tool_results"]) for r in agent.model.requests]

    def tools_sent(self, agent: Any) -> list[dict[str, Any]]:
        return [r["tools"] for r in agent.model.requests]
